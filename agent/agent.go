// Package agent is muster's node daemon: it registers the node with the
// store, takes assignments from its Watch stream, and supervises the
// workers of each job on this node.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/engine"
	"github.com/musterhq/muster/envprop"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/hostfile"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// Config configures an Agent.
type Config struct {
	Logger    *zap.Logger
	StoreAddr string
	Security  rendezvous.Security
	// Name is the node's name; the host name by default.
	Name string
	// Addr is the node's address for workers (MASTER_ADDR, the NCCL root).
	Addr string
	// Rank is an explicit node rank, or -1.
	Rank int32
	// GPUs is what the node offers; GPUError says why it is empty, if it is.
	GPUs     []gpu.Device
	GPUError string
	// Environ is what workers of jobs that inherit an environment get.
	Environ []string
	// TempDir holds each job's generated files (its hostfile).
	TempDir string
	// SysRoot is where sysfs is, for NCCL network detection.
	SysRoot string
	// ShutdownTimeout bounds how long Close waits for workers after SIGKILL.
	ShutdownTimeout time.Duration
}

// Agent is a running node daemon.
type Agent struct {
	cfg    Config
	log    *zap.Logger
	client *rendezvous.Client
	pub    *publisher

	session string
	watch   musterv1.Rendezvous_WatchClient
	cancel  context.CancelFunc

	mu    sync.Mutex
	jobs  map[string]*Supervisor
	ports map[string][]net.Listener // by round
	wg    sync.WaitGroup

	ncclOnce    sync.Once
	ncclVersion int

	ready     chan struct{}
	errc      chan error
	closeOnce sync.Once
}

// Start registers with the store and begins taking assignments. The agent is
// ready for jobs once ReadyNotify is closed.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1"
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 15 * time.Second
	}
	if _, err := netip.ParseAddr(cfg.Addr); err != nil {
		return nil, fmt.Errorf("--addr %q is not an IP address", cfg.Addr)
	}
	c, err := rendezvous.Dial(cfg.StoreAddr, cfg.Security)
	if err != nil {
		return nil, err
	}
	node := &musterv1.Node{Name: cfg.Name, Addr: cfg.Addr, Rank: cfg.Rank, GpuError: cfg.GPUError}
	for _, d := range cfg.GPUs {
		node.Gpus = append(node.Gpus, &musterv1.GPU{Index: int32(d.Index), Uuid: d.UUID, Name: d.Name, MemoryBytes: d.MemoryBytes})
	}
	reg, err := c.Register(ctx, &musterv1.RegisterRequest{Node: node})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("register with store %s: %w", cfg.StoreAddr, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	watch, err := c.Watch(wctx, &musterv1.WatchRequest{Session: reg.Session})
	if err != nil {
		cancel()
		c.Close()
		return nil, fmt.Errorf("watch store %s: %w", cfg.StoreAddr, err)
	}
	a := &Agent{
		cfg: cfg, log: cfg.Logger, client: c, session: reg.Session, watch: watch, cancel: cancel,
		pub:   newPublisher(cfg.Logger, c, reg.Session),
		jobs:  map[string]*Supervisor{},
		ports: map[string][]net.Listener{},
		ready: make(chan struct{}),
		errc:  make(chan error, 1),
	}
	go a.pub.run(context.Background())
	go a.loop(wctx)
	close(a.ready)
	a.log.Info("agent registered", zap.String("node", cfg.Name), zap.String("addr", cfg.Addr),
		zap.String("store", cfg.StoreAddr), zap.Int("gpus", len(cfg.GPUs)))
	return a, nil
}

// ReadyNotify is closed once the agent takes assignments.
func (a *Agent) ReadyNotify() <-chan struct{} { return a.ready }

// Err delivers the error that ended the agent's Watch stream, if one did.
func (a *Agent) Err() <-chan error { return a.errc }

func (a *Agent) loop(ctx context.Context) {
	for {
		cmd, err := a.watch.Recv()
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("store stream ended; stopping this node's jobs", zap.Error(err))
				a.stopAll(0)
				a.errc <- fmt.Errorf("store %s: %w", a.cfg.StoreAddr, err)
			}
			close(a.errc)
			return
		}
		switch c := cmd.GetCommand().(type) {
		case *musterv1.AgentCommand_ReservePorts:
			a.reservePorts(ctx, c.ReservePorts)
		case *musterv1.AgentCommand_Start:
			a.startJob(ctx, c.Start)
		case *musterv1.AgentCommand_Stop:
			a.stopJob(c.Stop)
		}
	}
}

// reservePorts binds free ports on the node's address and holds them until
// the round's workers start, so that no other program takes them meanwhile.
func (a *Agent) reservePorts(ctx context.Context, r *musterv1.ReservePorts) {
	req := &musterv1.PortsReservedRequest{Session: a.session, RoundId: r.GetRoundId()}
	var held []net.Listener
	for i := int32(0); i < r.GetCount() && i < 16; i++ {
		l, err := net.Listen("tcp", net.JoinHostPort(a.cfg.Addr, "0"))
		if err != nil {
			req.Error = err.Error()
			break
		}
		held = append(held, l)
		req.Ports = append(req.Ports, int32(l.Addr().(*net.TCPAddr).Port))
	}
	a.mu.Lock()
	a.ports[r.GetRoundId()] = held
	a.mu.Unlock()
	if _, err := a.client.PortsReserved(ctx, req); err != nil {
		a.log.Warn("reporting reserved ports failed", zap.Error(err))
		a.releasePorts(r.GetRoundId())
	}
}

func (a *Agent) releasePorts(round string) {
	a.mu.Lock()
	held := a.ports[round]
	delete(a.ports, round)
	a.mu.Unlock()
	for _, l := range held {
		l.Close()
	}
}

func (a *Agent) stopJob(st *musterv1.StopJob) {
	a.mu.Lock()
	s := a.jobs[st.GetJobId()]
	a.mu.Unlock()
	if s != nil {
		a.log.Info("stopping job", zap.String("job", st.GetJobId()), zap.String("reason", st.GetReason()))
		s.Stop(time.Duration(st.GetKillTimeoutMs()) * time.Millisecond)
	}
}

func (a *Agent) stopAll(grace time.Duration) {
	a.mu.Lock()
	jobs := make([]*Supervisor, 0, len(a.jobs))
	for _, s := range a.jobs {
		jobs = append(jobs, s)
	}
	a.mu.Unlock()
	for _, s := range jobs {
		s.Stop(grace)
	}
}

// startJob starts this node's workers of an assignment.
func (a *Agent) startJob(ctx context.Context, asg *musterv1.Assignment) {
	spec := asg.GetSpec()
	kill := time.Duration(spec.GetKillTimeoutMs()) * time.Millisecond
	sup := newSupervisor(a.log, asg.GetJobId(), a.cfg.Name, kill, a.pub.publish)
	plans, cleanup, err := a.plan(asg)
	a.releasePorts(asg.GetRoundId())
	if err != nil {
		a.log.Warn("job cannot start", zap.String("job", asg.GetJobId()), zap.Error(err))
		// Report every local worker as failed to start, so the job ends.
		for l := 0; l < int(asg.GetNproc()); l++ {
			sup.exited(workerPlan{rank: int(asg.GetNodeRank()*asg.GetNproc()) + l, localRank: l},
				exitStatus{code: 1, err: err.Error()}, false, nil)
		}
		return
	}
	a.mu.Lock()
	a.jobs[asg.GetJobId()] = sup
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		sup.Run(plans, spec.GetLogDir())
		cleanup()
		a.mu.Lock()
		delete(a.jobs, asg.GetJobId())
		a.mu.Unlock()
	}()
}

// plan computes each local worker's command and environment and writes the
// job's hostfile.
func (a *Agent) plan(asg *musterv1.Assignment) ([]workerPlan, func(), error) {
	spec := asg.GetSpec()
	if err := prepareLogDir(spec.GetLogDir()); err != nil {
		return nil, nil, err
	}
	if dir := spec.GetWorkdir(); dir != "" {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, nil, fmt.Errorf("working directory %s does not exist on node %s", dir, a.cfg.Name)
		}
	}
	jobDir := filepath.Join(a.cfg.TempDir, "muster-"+asg.GetJobId())
	if err := os.MkdirAll(jobDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("job directory: %w", err)
	}
	cleanup := func() { os.RemoveAll(jobDir) }
	hosts := make([]hostfile.Host, len(asg.GetNodeAddrs()))
	for i, addr := range asg.GetNodeAddrs() {
		hosts[i] = hostfile.Host{Name: addr, Slots: int(asg.GetNodeSlots()[i])}
	}
	hf := filepath.Join(jobDir, "hostfile")
	f, err := os.Create(hf)
	if err == nil {
		err = hostfile.Emit(f, hostfile.OpenMPI, hosts)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("job hostfile: %w", err)
	}

	base := minimalEnviron(a.cfg.Environ)
	if spec.GetInheritEnv() {
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
			argv: spec.GetArgv(), env: envprop.Build(in), dir: spec.GetWorkdir()}})
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

// Close stops the agent, in order: (1) every job's workers get SIGTERM, then
// SIGKILL after grace; (2) it waits for them, at most ShutdownTimeout past
// the grace; (3) it flushes their last events to the store; (4) it ends its
// Watch stream and connection.
func (a *Agent) Close(grace time.Duration) error {
	var err error
	a.closeOnce.Do(func() {
		a.stopAll(grace)
		done := make(chan struct{})
		go func() { a.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace + a.cfg.ShutdownTimeout):
			err = errors.New("agent: workers still running after SIGKILL")
		}
		a.pub.close()
		a.cancel()
		a.mu.Lock()
		rounds := make([]string, 0, len(a.ports))
		for round := range a.ports {
			rounds = append(rounds, round)
		}
		a.mu.Unlock()
		for _, round := range rounds {
			a.releasePorts(round)
		}
		a.client.Close()
	})
	return err
}

// Name is the node's name as registered.
func (a *Agent) Name() string { return a.cfg.Name }
