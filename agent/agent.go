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
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/gpu"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// Config configures an Agent.
type Config struct {
	Logger    *zap.Logger
	StoreAddr string
	Security  rendezvous.Security
	// StoreCA is the CA file workers verify the store's TLS certificate
	// with (MUSTER_TLS_CA), when the store's TCP address uses TLS.
	StoreCA string
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

	session string
	watch   musterv1.Rendezvous_WatchClient
	ctx     context.Context // ends when the agent has closed
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
	removeStaleJobDirs(cfg.Logger, cfg.TempDir)
	c, err := rendezvous.DialAgent(cfg.StoreAddr, cfg.Security)
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
		cfg: cfg, log: cfg.Logger, client: c, session: reg.Session, watch: watch, ctx: wctx, cancel: cancel,
		jobs:  map[string]*Supervisor{},
		ports: map[string][]net.Listener{},
		ready: make(chan struct{}),
		errc:  make(chan error, 1),
	}
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
				a.stopAll(0, fmt.Sprintf("the agent on node %s lost its store", a.cfg.Name))
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

func (a *Agent) stopJob(st *musterv1.StopJob) {
	a.mu.Lock()
	s := a.jobs[st.GetJobId()]
	a.mu.Unlock()
	if s != nil {
		a.log.Info("stopping job", zap.String("job", st.GetJobId()), zap.String("reason", st.GetReason()))
		s.Stop(time.Duration(st.GetKillTimeoutMs()) * time.Millisecond)
	}
}

// stopAll stops every job here because this agent goes away, for reason.
func (a *Agent) stopAll(grace time.Duration, reason string) {
	a.mu.Lock()
	jobs := make([]*Supervisor, 0, len(a.jobs))
	for _, s := range a.jobs {
		jobs = append(jobs, s)
	}
	a.mu.Unlock()
	for _, s := range jobs {
		s.Shutdown(grace, reason)
	}
}

// startJob starts this node's workers of an assignment.
func (a *Agent) startJob(ctx context.Context, asg *musterv1.Assignment) {
	spec := asg.GetSpec()
	kill := time.Duration(spec.GetKillTimeoutMs()) * time.Millisecond
	pub := newJobPublisher(ctx, a.log, a.client, a.session, asg.GetJobId())
	go pub.run()
	sup := newSupervisor(a.log, asg.GetJobId(), a.cfg.Name, kill, pub)
	plans, files, err := a.plan(asg)
	a.releasePorts(asg.GetRoundId())
	a.mu.Lock()
	if err == nil {
		a.jobs[asg.GetJobId()] = sup
	}
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		if err != nil {
			a.log.Warn("job cannot start", zap.String("job", asg.GetJobId()), zap.Error(err))
			// Report every local worker as failed to start, so the job ends.
			for l := 0; l < int(asg.GetNproc()); l++ {
				sup.exited(workerPlan{rank: int(asg.GetNodeRank()*asg.GetNproc()) + l, localRank: l},
					exitStatus{code: 1, err: validText(err.Error())}, nil)
			}
		} else {
			sup.Run(plans, files)
		}
		files.feed.close()
		// The job's last events reach the store before it counts as ended here.
		pub.close()
		a.mu.Lock()
		delete(a.jobs, asg.GetJobId())
		a.mu.Unlock()
	}()
}

// Close stops the agent, in order: (1) every job's workers get SIGTERM, then
// SIGKILL after grace, and count as failed because the agent shut down; (2)
// it waits for them and for their last events to reach the store, at most
// ShutdownTimeout past the grace; (3) it drops what is still unsent and ends
// its Watch stream and connection.
func (a *Agent) Close(grace time.Duration) error {
	var err error
	a.closeOnce.Do(func() {
		a.stopAll(grace, fmt.Sprintf("the agent on node %s shut down", a.cfg.Name))
		done := make(chan struct{})
		go func() { a.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace + a.cfg.ShutdownTimeout):
			err = errors.New("agent: workers or their events still pending after SIGKILL")
		}
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
