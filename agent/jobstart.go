package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/musterhq/muster/cgroup"
	"github.com/musterhq/muster/engine/uniqueid"
	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/hostfile"
	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/ncclnet"
	"github.com/musterhq/muster/ownfile"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/supervise"
	"github.com/musterhq/muster/topology"
)

// jobStart is one assignment's start on this node: what its steps make, for
// the steps after them and for the job's run.
type jobStart struct {
	a   *Agent
	asg *musterv1.Assignment
	sup *Supervisor

	cred      *syscall.Credential
	workdir   string
	files     jobFiles
	hostfile  string
	addrsFile string
	addrs     []string // NodeAddrs, unless the roster is in addrsFile or absent
	rasAddr   string   // the job's NCCL RAS address here, when one was free
	plans     []workerPlan
	mpi       *pmiService
	workers   []*worker        // one per plan
	spec      supervise.Spec   // the shim's workers
	started   []*worker        // the workers in spec, in its order
	group     *supervise.Group // the running workers
	cgroup    *cgroup.Job      // the workers' cgroups, when the agent makes them
	hang      *hangWatch       // with a hang timeout
}

// errStopping is a start that a stop came before.
var errStopping = errors.New("the job was stopped before its workers started")

// startSteps is a job's start on this node, in order. The ports were made
// by ReservePorts: the start only gives them back. The TCPStore, made then
// too, is the store's to release when no round needs it (rounds.go).
func (js *jobStart) startSteps() []step {
	steps := []step{
		{name: "ports", undo: js.releasePorts},
	}
	// The node checks its health once the assignment is checked (it knows
	// the job's user), before it makes anything of the job's (health.go).
	plan := js.planSteps()
	steps = append(steps, plan[0], step{name: "health", do: js.checkHealth})
	steps = append(steps, plan[1:]...)
	return append(steps,
		step{name: "cgroups", do: js.makeCgroups, undo: js.removeCgroups},
		step{name: "log files", do: js.openLogs, undo: js.closeLogs},
		step{name: "PMI service", do: js.startPMI, undo: func() { js.mpi.close() }},
		step{name: "pipes and PMI sockets", do: js.makePipes, undo: js.abandon},
		step{name: "workers", do: js.startWorkers},
	)
}

// planSteps compute each local worker's command and environment and write
// the job's hostfile.
func (js *jobStart) planSteps() []step {
	return []step{
		{name: "assignment", do: js.check},
		{name: "job directory", do: js.makeJobDir, undo: js.removeJobDir},
		// Its files are in the job directory, whose undo takes them.
		{name: "hostfile", do: js.writeRoster},
		{name: "stdin", do: js.openStdin, undo: func() { js.files.feed.close() }},
		{name: "commands", do: js.planWorkers},
		{name: "heartbeat files", do: js.makeHeartbeats},
	}
}

func (js *jobStart) releasePorts() { js.a.releasePorts(js.asg.GetRoundId()) }

// check checks the assignment, the job's user, and its directories.
// Everything after it that touches files does so as the job's user: a user
// must not use muster to write where they cannot.
func (js *jobStart) check() error {
	asg := js.asg
	if err := checkAssignment(asg); err != nil {
		return fmt.Errorf("the store's assignment does not add up: %w", err)
	}
	spec := asg.GetSpec()
	cred, err := js.a.credential(asg.GetJobId(), asg.GetRunAs())
	if err != nil {
		return err
	}
	js.cred = cred
	if dir := string(spec.GetLogDir()); dir != "" {
		// Each job's logs go to a directory of their own: two jobs never
		// write over each other's files. Another user's link or directory
		// on the way would lead them elsewhere.
		js.files.logDir = filepath.Join(dir, asg.GetJobId())
		if err := asUser(cred, func() error { return ownfile.MkdirAll(js.files.logDir, 0o755, credUID(cred)) }); err != nil {
			// The error names the directory, which may be any bytes.
			return errors.New(validText("--log-dir: " + err.Error()))
		}
	}
	js.workdir = string(spec.GetWorkdir())
	return asUser(cred, func() error { return checkWorkdir(js.workdir) })
}

func (js *jobStart) makeJobDir() error {
	var err error
	js.files.dir, js.files.lock, err = makeJobDir(js.a.cfg.TempDir, js.asg.GetJobId(), js.asg.GetNodeRank(), js.cred)
	if err != nil {
		return fmt.Errorf("job directory: %w", err)
	}
	return nil
}

func (js *jobStart) removeJobDir() {
	if js.files.dir != "" {
		os.RemoveAll(js.files.dir)
		js.files.lock.Close()
	}
}

// writeRoster writes the roster's files, on nodes whose assignment carries
// it: every node of a small job, node rank 0 of a large one.
func (js *jobStart) writeRoster() error {
	asg := js.asg
	if !hasRoster(asg) {
		return nil
	}
	addrs := asg.GetNodeAddrs()
	hosts := make([]hostfile.Host, len(addrs))
	for i, addr := range addrs {
		hosts[i] = hostfile.Host{Name: addr, Slots: int(asg.GetNodeSlots()[i])}
	}
	hf := filepath.Join(js.files.dir, "hostfile")
	err := asUser(js.cred, func() error {
		return writeFile(hf, func(w io.Writer) error { return hostfile.Emit(w, hostfile.OpenMPI, hosts) })
	})
	if err == nil && !envprop.NodeAddrsFit(addrs) {
		js.addrsFile = filepath.Join(js.files.dir, "node_addrs")
		err = asUser(js.cred, func() error {
			return writeFile(js.addrsFile, func(w io.Writer) error {
				_, err := io.WriteString(w, envprop.JoinNodeAddrs(addrs)+"\n")
				return err
			})
		})
		addrs = nil
	}
	if err != nil {
		return fmt.Errorf("job hostfile: %w", err)
	}
	js.hostfile, js.addrs = hf, addrs
	return nil
}

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

// openStdin makes the pipes of the local ranks that read the launcher's
// stdin and feeds them from the store.
func (js *jobStart) openStdin() error {
	a, asg := js.a, js.asg
	in := envprop.Input{NodeRank: int(asg.GetNodeRank()), NProc: int(asg.GetNproc())}
	ranks := map[int]int{}
	for l := 0; l < int(asg.GetNproc()); l++ {
		in.LocalRank = l
		ranks[l] = in.Rank()
	}
	feed, err := newStdinFeed(a.log, asg.GetSpec(), ranks)
	if err != nil {
		return fmt.Errorf("stdin pipes: %w", err)
	}
	js.files.feed = feed
	feed.start(func(ctx context.Context) (musterv1.Agents_ReadStdinClient, error) {
		return a.client.ReadStdin(ctx, &musterv1.ReadStdinRequest{Session: a.sessionID(), JobId: asg.GetJobId()})
	})
	return nil
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
		in.Threads, in.UCXDevice = bindings[l].threads, bindings[l].ucxDevice
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
	return bindingsOf(js.a.topo, mode, gpus)
}

// makeHeartbeats makes each worker's heartbeat file, with a hang timeout.
func (js *jobStart) makeHeartbeats() error {
	var err error
	if js.hang, err = newHangWatch(js.a.log, js.asg.GetSpec(), js.workers, js.cred); err != nil {
		return fmt.Errorf("heartbeat files: %w", err)
	}
	if js.hang != nil && len(js.plans) > 0 {
		js.hang.round, js.hang.ras = js.asg.GetRoundId(), envprop.RASAddr(js.plans[0].spec.env)
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

func (js *jobStart) startPMI() error {
	var err error
	js.mpi, err = js.a.startPMI(js.asg)
	return err
}
