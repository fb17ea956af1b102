package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"

	"go.uber.org/zap"

	"github.com/musterhq/muster/engine"
	"github.com/musterhq/muster/engine/uniqueid"
	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/hostfile"
	"github.com/musterhq/muster/jobspec"
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

// plan computes each local worker's command and environment and writes the
// job's hostfile.
func (a *Agent) plan(asg *musterv1.Assignment) ([]workerPlan, jobFiles, error) {
	var files jobFiles
	if err := checkAssignment(asg); err != nil {
		return nil, files, fmt.Errorf("the store's assignment does not add up: %w", err)
	}
	spec := asg.GetSpec()
	// Everything below that touches files does so as the job's user: a user
	// must not use muster to write where they cannot.
	cred, err := a.credential(asg.GetJobId(), asg.GetRunAs())
	if err != nil {
		return nil, files, err
	}
	if dir := string(spec.GetLogDir()); dir != "" {
		// Each job's logs go to a directory of their own: two jobs never
		// write over each other's files.
		files.logDir = filepath.Join(dir, asg.GetJobId())
		if err := asUser(cred, func() error { return os.MkdirAll(files.logDir, 0o755) }); err != nil {
			// The error names the directory, which may be any bytes.
			return nil, files, errors.New(validText("--log-dir: " + err.Error()))
		}
	}
	workdir := string(spec.GetWorkdir())
	if err := asUser(cred, func() error { return checkWorkdir(workdir) }); err != nil {
		return nil, files, err
	}
	var jobDir string
	var lock *os.File
	err = asUser(cred, func() (err error) {
		jobDir, lock, err = makeJobDir(a.cfg.TempDir, asg.GetJobId(), asg.GetNodeRank())
		return err
	})
	if err != nil {
		return nil, files, fmt.Errorf("job directory: %w", err)
	}
	files.dir, files.lock = jobDir, lock
	cleanup := func() {
		os.RemoveAll(jobDir)
		lock.Close()
	}
	// The roster's files are written only on nodes whose assignment carries
	// it: every node of a small job, node rank 0 of a large one.
	var hf, addrsFile string
	addrs := asg.GetNodeAddrs()
	if hasRoster(asg) {
		hosts := make([]hostfile.Host, len(addrs))
		for i, addr := range addrs {
			hosts[i] = hostfile.Host{Name: addr, Slots: int(asg.GetNodeSlots()[i])}
		}
		hf = filepath.Join(jobDir, "hostfile")
		err = asUser(cred, func() error {
			return writeFile(hf, func(w io.Writer) error { return hostfile.Emit(w, hostfile.OpenMPI, hosts) })
		})
		if err == nil && !envprop.NodeAddrsFit(addrs) {
			addrsFile = filepath.Join(jobDir, "node_addrs")
			err = asUser(cred, func() error {
				return writeFile(addrsFile, func(w io.Writer) error {
					_, err := io.WriteString(w, envprop.JoinNodeAddrs(addrs)+"\n")
					return err
				})
			})
			addrs = nil
		}
		if err != nil {
			cleanup()
			return nil, jobFiles{}, fmt.Errorf("job hostfile: %w", err)
		}
	} else {
		addrs = nil
	}

	base := minimalEnviron(a.cfg.Environ)
	switch {
	case cred != nil:
		base = userEnviron(a.cfg.Environ, cred.Uid)
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
		JobID: asg.GetJobId(), StoreAddr: asg.GetStoreAddr(), Hostfile: hf,
		JobToken: asg.GetJobToken(), StoreCA: a.cfg.StoreCA,
		NodeRank: int(asg.GetNodeRank()), NNodes: int(asg.GetNnodes()), NProc: int(asg.GetNproc()),
		NodeAddrs: addrs, NodeAddrsFile: addrsFile,
		MasterAddr: asg.GetMasterAddr(), MasterPort: int(asg.GetMasterPort()),
		NCCLCommID: asg.GetNcclCommId(), UniqueIDHex: id.Hex(),
		IsolateGPUs:  spec.GetIsolateGpus(),
		RestartCount: int(asg.GetRestartCount()), MaxRestarts: int(asg.GetMaxRestarts()),
		AgentStore: !spec.GetNoAgentStore(),
		NCCLVars:   net.Vars(),
		MPI:        spec.GetMpi() == jobspec.MPICH,
		OpenMPI:    spec.GetMpi() == jobspec.OpenMPI,
		NodeName:   a.cfg.Name, RoundID: asg.GetRoundId(),
	}
	for _, g := range asg.GetGpus() {
		in.GPUs = append(in.GPUs, int(g))
	}
	ranks := map[int]int{}
	for l := 0; l < int(asg.GetNproc()); l++ {
		in.LocalRank = l
		ranks[l] = in.Rank()
	}
	feed, err := newStdinFeed(a.log, spec, ranks)
	if err != nil {
		cleanup()
		return nil, jobFiles{}, fmt.Errorf("stdin pipes: %w", err)
	}
	files.feed = feed
	argv := byteStrings(spec.GetArgv())
	if in.OpenMPI {
		if argv, err = a.openMPIArgv(asg, in, jobDir, cred, argv); err != nil {
			cleanup()
			return nil, jobFiles{}, err
		}
	}
	var plans []workerPlan
	for l := 0; l < int(asg.GetNproc()); l++ {
		in.LocalRank = l
		plans = append(plans, workerPlan{rank: in.Rank(), localRank: l, spec: workerSpec{
			argv: argv, env: envprop.Build(in), dir: workdir, cred: cred, stdin: feed.reader(l)}})
	}
	feed.start(func(ctx context.Context) (musterv1.Agents_ReadStdinClient, error) {
		return a.client.ReadStdin(ctx, &musterv1.ReadStdinRequest{Session: a.sessionID(), JobId: asg.GetJobId()})
	})
	return plans, files, nil
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
	if len(asg.GetGpus()) > 0 {
		a.ncclOnce.Do(func() { a.ncclVersion, _ = engine.LibraryNCCLVersion() })
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
