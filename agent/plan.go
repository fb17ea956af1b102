package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"syscall"

	"go.uber.org/zap"

	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/ncclnet"
	"github.com/musterhq/muster/openmpi"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// jobFiles is what a job has on this node besides its processes: its
// directory (held by a lock until its shim ends) and its log directory.
type jobFiles struct {
	dir    string
	lock   *os.File
	logDir string
	feed   *stdinFeed
}

// openMPIArgv is the command of an Open MPI job's one worker on this node:
// mpirun's (on node rank 0) or its daemon's, run by this binary.
func (a *Agent) openMPIArgv(asg *musterv1.Assignment, in envprop.Input, jobDir string, cred *syscall.Credential, argv []string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--mpi openmpi: this agent's binary: %w", err)
	}
	in.LocalRank = 0
	n := openmpi.Node{Self: self, Dir: jobDir, Names: asg.GetNodeNames(), Slots: int(asg.GetSpec().GetNproc()),
		Env: envprop.Build(in), Argv: argv, Root: runsAsRoot(cred)}
	err = asUser(cred, func() (err error) {
		argv, err = openmpi.Argv(int(asg.GetNodeRank()), n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("--mpi openmpi: %w", err)
	}
	return argv, nil
}

// hasRoster says whether the assignment carries the job's roster: every
// node's address and slots.
func hasRoster(asg *musterv1.Assignment) bool {
	n := len(asg.GetNodeAddrs())
	return n > 0 && n == int(asg.GetNnodes()) && len(asg.GetNodeSlots()) == n
}

// writeFile creates path and writes it with emit.
func writeFile(path string, emit func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = emit(w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// detectNCCLNet finds NCCL's network variables for this node; the NCCL
// version is read from the library once per agent, and only for GPU jobs.
func (a *Agent) detectNCCLNet(asg *musterv1.Assignment, base, user []string) ncclnet.Result {
	master, err := netip.ParseAddr(asg.GetMasterAddr())
	if err != nil {
		return ncclnet.Result{}
	}
	version := 0
	if len(asg.GetGpus()) > 0 && a.cfg.NCCLVersion != nil {
		a.ncclOnce.Do(func() { a.ncclVersion, _ = a.cfg.NCCLVersion() })
		version = a.ncclVersion
	}
	userVars := ncclnet.UserVars(append(append([]string(nil), base...), user...))
	net, err := ncclnet.Detect(ncclnet.Options{SysRoot: a.cfg.SysRoot, MasterAddr: master, NCCLVersion: version, UserEnv: userVars})
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

// checkWorkdir says what is wrong with a job's working directory on this
// node, if anything (the failure names the node). A path is quoted when it
// must be: it may be any bytes.
func checkWorkdir(dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("working directory %s does not exist", showPath(dir))
	case err != nil:
		return fmt.Errorf("working directory %s: %v", showPath(dir), errors.Unwrap(err))
	case !fi.IsDir():
		return fmt.Errorf("working directory %s is not a directory", showPath(dir))
	}
	return nil
}

// byteStrings is a JobSpec's byte fields as Go strings, which hold any bytes.
func byteStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
