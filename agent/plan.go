package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/musterhq/muster/engine"
	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/hostfile"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// plan computes each local worker's command and environment and writes the
// job's hostfile.
func (a *Agent) plan(asg *musterv1.Assignment) ([]workerPlan, func(), error) {
	spec := asg.GetSpec()
	// Everything below that touches files does so as the job's user: a user
	// must not use muster to write where they cannot.
	cred, err := a.credential(asg.GetJobId(), asg.GetRunAs())
	if err != nil {
		return nil, nil, err
	}
	if err := asUser(cred, func() error { return prepareLogDir(spec.GetLogDir()) }); err != nil {
		return nil, nil, err
	}
	if dir := spec.GetWorkdir(); dir != "" {
		err := asUser(cred, func() error {
			fi, err := os.Stat(dir)
			if err == nil && !fi.IsDir() {
				return fmt.Errorf("working directory %s is not a directory", dir)
			}
			return err
		})
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("working directory %s does not exist on node %s", dir, a.cfg.Name)
		case err != nil:
			return nil, nil, fmt.Errorf("working directory on node %s: %w", a.cfg.Name, err)
		}
	}
	jobDir := filepath.Join(a.cfg.TempDir, "muster-"+asg.GetJobId())
	cleanup := func() { asUser(cred, func() error { return os.RemoveAll(jobDir) }) }
	hosts := make([]hostfile.Host, len(asg.GetNodeAddrs()))
	for i, addr := range asg.GetNodeAddrs() {
		hosts[i] = hostfile.Host{Name: addr, Slots: int(asg.GetNodeSlots()[i])}
	}
	hf := filepath.Join(jobDir, "hostfile")
	err = asUser(cred, func() error {
		if err := os.MkdirAll(jobDir, 0o700); err != nil {
			return fmt.Errorf("job directory: %w", err)
		}
		f, err := os.Create(hf)
		if err == nil {
			err = hostfile.Emit(f, hostfile.OpenMPI, hosts)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fmt.Errorf("job hostfile: %w", err)
		}
		return nil
	})
	if err != nil {
		cleanup()
		return nil, nil, err
	}

	base := minimalEnviron(a.cfg.Environ)
	switch {
	case cred != nil:
		base = userEnviron(a.cfg.Environ, cred.Uid)
	case spec.GetInheritEnv():
		base = a.cfg.Environ
	}
	var net envprop.NCCLNet
	if spec.GetNcclAutodetect() {
		net = a.detectNCCLNet(asg, base, spec.GetEnv())
	}
	id := engine.UniqueID(asg.GetNcclUniqueId())
	in := envprop.Input{
		Base: base, User: spec.GetEnv(),
		JobID: asg.GetJobId(), StoreAddr: asg.GetStoreAddr(), Hostfile: hf,
		JobToken: asg.GetJobToken(), StoreCA: a.cfg.StoreCA,
		NodeRank: int(asg.GetNodeRank()), NodeAddrs: asg.GetNodeAddrs(), NProc: int(asg.GetNproc()),
		MasterAddr: asg.GetMasterAddr(), MasterPort: int(asg.GetMasterPort()),
		NCCLCommID: asg.GetNcclCommId(), UniqueIDHex: id.Hex(),
		IsolateGPUs:  spec.GetIsolateGpus(),
		RestartCount: int(asg.GetRestartCount()), MaxRestarts: int(asg.GetMaxRestarts()),
		NCCLNet: net,
	}
	for _, g := range asg.GetGpus() {
		in.GPUs = append(in.GPUs, int(g))
	}
	var plans []workerPlan
	for l := 0; l < int(asg.GetNproc()); l++ {
		in.LocalRank = l
		plans = append(plans, workerPlan{rank: in.Rank(), localRank: l, spec: workerSpec{
			argv: spec.GetArgv(), env: envprop.Build(in), dir: spec.GetWorkdir(), cred: cred}})
	}
	return plans, cleanup, nil
}

// detectNCCLNet finds NCCL's network variables for this node; the NCCL
// version is read from the library once per agent, and only for GPU jobs.
func (a *Agent) detectNCCLNet(asg *musterv1.Assignment, base, user []string) envprop.NCCLNet {
	master, err := netip.ParseAddr(asg.GetMasterAddr())
	if err != nil {
		return envprop.NCCLNet{}
	}
	version := 0
	if len(asg.GetGpus()) > 0 {
		a.ncclOnce.Do(func() { a.ncclVersion, _ = engine.LibraryNCCLVersion() })
		version = a.ncclVersion
	}
	userVars := envprop.UserNCCLVars(append(append([]string(nil), base...), user...))
	net, err := envprop.DetectNCCLNet(envprop.NetOptions{SysRoot: a.cfg.SysRoot, MasterAddr: master, NCCLVersion: version, UserEnv: userVars})
	if err != nil {
		a.log.Warn("nccl network detection failed", zap.Error(err))
	}
	return net
}

// minimalEnviron is what a job that does not inherit the agent's environment
// still needs to find programs and a home.
func minimalEnviron(env []string) []string {
	var out []string
	for _, name := range []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "SHELL"} {
		if v, ok := envprop.Lookup(env, name); ok {
			out = append(out, name+"="+v)
		}
	}
	return out
}
