package agent

import (
	"net"

	"github.com/musterhq/muster/engine/uniqueid"
	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/ncclnet"
	"github.com/musterhq/muster/topology"
)

// input is what the workers' environment is built from, for local rank 0.
func (js *jobStart) input() envprop.Input {
	a, asg := js.a, js.asg
	spec := asg.GetSpec()
	base := minimalEnviron(a.cfg.Environ)
	switch {
	case js.cred != nil:
		base = userEnviron(a.cfg.Environ, js.cred.Uid)
	case spec.GetInheritEnv():
		base = a.cfg.Environ
	}
	user := byteStrings(spec.GetEnv())
	var net ncclnet.Result
	if spec.GetNcclAutodetect() {
		net = a.detectNCCLNet(asg, base, user)
	}
	id := uniqueid.ID(asg.GetNcclUniqueId())
	in := envprop.Input{
		Base: base, User: user,
		JobID: asg.GetJobId(), StoreAddr: asg.GetStoreAddr(), Hostfile: js.hostfile,
		JobToken: asg.GetJobToken(), StoreCA: a.cfg.StoreCA,
		NodeRank: int(asg.GetNodeRank()), NNodes: int(asg.GetNnodes()), NProc: int(asg.GetNproc()),
		NodeAddrs: js.addrs, NodeAddrsFile: js.addrsFile,
		MasterAddr: asg.GetMasterAddr(), MasterPort: int(asg.GetMasterPort()),
		NCCLCommID: asg.GetNcclCommId(), UniqueIDHex: id.Hex(),
		IsolateGPUs:  spec.GetIsolateGpus(),
		RestartCount: int(asg.GetRestartCount()), MaxRestarts: int(asg.GetMaxRestarts()),
		AgentStore: !spec.GetNoAgentStore(),
		NCCLVars:   net.Vars(),
		MPI:        spec.GetMpi() == jobspec.MPICH,
		OpenMPI:    spec.GetMpi() == jobspec.OpenMPI,
		NodeName:   a.cfg.Name, RoundID: asg.GetRoundId(),
		RASAddr: js.rasAddr, ErrorDir: js.files.dir,
	}
	if spec.GetHangTimeoutMs() > 0 {
		in.Hang = &envprop.Hang{Dir: js.files.dir, TraceDir: js.files.logDir}
	}
	for _, g := range asg.GetGpus() {
		in.GPUs = append(in.GPUs, int(g))
	}
	return in
}

// planWorkers computes each local worker's command and environment.
func (js *jobStart) planWorkers() error {
	js.rasAddr = freeLoopbackAddr()
	in := js.input()
	argv := byteStrings(js.asg.GetSpec().GetArgv())
	if in.OpenMPI {
		var err error
		if argv, err = js.a.openMPIArgv(js.asg, in, js.files.dir, js.cred, argv); err != nil {
			return err
		}
	}
	bindings := js.bindings(in)
	for l := 0; l < int(js.asg.GetNproc()); l++ {
		in.LocalRank = l
		in.UCXDevice = bindings[l].ucxDevice
		env := terminalEnv(envprop.Build(in), js.asg.GetSpec().GetTty(), in.Rank(), in.User)
		pl := workerPlan{rank: in.Rank(), localRank: l, gpus: in.LocalGPUs(), binding: bindings[l], spec: workerSpec{
			argv: argv, env: env, dir: js.workdir, cred: js.cred, stdin: js.files.feed.reader(l)}}
		// Only the agent's own path is read: another one may be anything.
		if file, _ := envprop.Lookup(env, envprop.TorchelasticErrorFile); file == envprop.ErrorFilePath(js.files.dir, pl.rank) {
			pl.errorFile = file
		}
		js.plans = append(js.plans, pl)
	}
	js.workers = make([]*worker, len(js.plans))
	for i, pl := range js.plans {
		js.workers[i] = &worker{plan: pl, exit: make(chan exitStatus, 1)}
	}
	return nil
}

// freeLoopbackAddr is a loopback port free now, for the job's NCCL RAS
// service, which binds it itself; "" when none could be had, and NCCL
// keeps its default.
func freeLoopbackAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer l.Close()
	return l.Addr().String()
}

// bindings is where each local worker runs, in the job's --cpu-bind mode.
// An Open MPI job's workers are its daemons, which start the ranks: they
// are left unbound, as mpirun's own binding applies to its ranks.
func (js *jobStart) bindings(in envprop.Input) []workerBinding {
	mode, err := topology.ParseMode(js.asg.GetSpec().GetCpuBind())
	if err != nil || in.OpenMPI {
		mode = topology.BindNone
	}
	gpus := make([][]int, js.asg.GetNproc())
	for l := range gpus {
		in.LocalRank = l
		gpus[l] = in.LocalGPUs()
	}
	return js.a.cores.bind(js.asg.GetRoundId(), func(busy topology.CPUSet) []workerBinding {
		return bindingsOf(js.a.topo, mode, gpus, busy)
	})
}

// releaseCores lets go of the cores the round's workers were bound to.
func (js *jobStart) releaseCores() { js.a.cores.release(js.asg.GetRoundId()) }
