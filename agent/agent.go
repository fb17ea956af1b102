// Package agent is muster's node daemon: it registers the node with the
// store, takes assignments from its Watch stream, and supervises the
// workers of each job on this node.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/cgroup"
	"github.com/musterhq/muster/fabric"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/kv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/ranklog"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/supervise"
	"github.com/musterhq/muster/tcpstore"
	"github.com/musterhq/muster/topology"
)

// Config configures an Agent.
type Config struct {
	Logger    *zap.Logger
	StoreAddr string
	// NCCLVersion, when set, reads the NCCL library's version (22809 for
	// 2.28.9) for GPU jobs' network settings, outside the agent's process
	// (package ncclprobe): the daemon loads no worker library. Unset: unknown.
	NCCLVersion func() (int, error)
	// StoreReplicas are a replicated store's replicas' addresses, StoreAddr
	// among them: the agent follows their leader (session.go). The store
	// tells them too, when the agent registers.
	StoreReplicas []string
	Security      security.Security
	// StoreCA is the CA file workers verify the store's TLS certificate
	// with (MUSTER_TLS_CA), when the store's TCP address uses TLS.
	StoreCA string
	// Name is the node's name; the host name by default.
	Name string
	// Addr is the node's address for workers (MASTER_ADDR, the NCCL root).
	Addr string
	// Rank is an explicit node rank, or -1.
	Rank int32
	// Fabric is the node's place in the network, widest level first; the
	// store orders node ranks by it. Nil: not known.
	Fabric fabric.Path
	// GPUs is what the node offers; GPUError says why it is empty, if it is.
	GPUs     []gpu.Device
	GPUError string
	// TopologyRoot is the root whose sys/ and proc/self/ the node's
	// topology is read from, once at start; "/" by default.
	TopologyRoot string
	// Environ is what workers of jobs that inherit an environment get.
	Environ []string
	// TempDir holds each job's directory (its hostfile); only the agent's
	// user may change it. DefaultTempDir by default.
	TempDir string
	// SysRoot is where sysfs is, for NCCL network detection.
	SysRoot string
	// ShutdownTimeout bounds how long Close waits for workers after SIGKILL.
	ShutdownTimeout time.Duration
	// Spare, when set, is a shim started ahead for the first job's workers;
	// the agent owns it, and ends it if no job takes it.
	Spare *supervise.Spare
	// RankLogs is where and how much of its jobs' ranks' output the agent
	// keeps, for `launcher logs`; with no Dir it keeps none.
	RankLogs ranklog.Config
	// GPUHealth checks the node's GPUs before every round (health.go); the
	// agent owns it, closing it when it has a Close method. Nil: NVML's
	// (gpu.Checker), which passes a node without NVML's GPUs at once.
	GPUHealth GPUHealth
	// HealthCommand, when set, runs with /bin/sh -c before every round's
	// workers start, and must exit 0 within HealthTimeout (60 s when 0).
	HealthCommand string
	HealthTimeout time.Duration
	// XIDs, when set, reports the GPUs' XID errors; the agent owns it. Nil:
	// NVML's, when GPUs were discovered (not declared).
	XIDs gpu.XIDSource
}

// nodeDirName is a node's name as one path element.
func nodeDirName(name string) string {
	if name == "" || name == "." || name == ".." {
		return "_" + name
	}
	return strings.NewReplacer("/", "_", "\x00", "_").Replace(name)
}

// Agent is a running node daemon.
type Agent struct {
	cfg    Config
	log    *zap.Logger
	client *storeclient.Client
	node   *musterv1.Node
	// topo is the node's topology, read once at start: each worker's
	// binding is computed from it. Nil when not read (tests).
	topo *topology.Topology
	// cores is what running rounds' workers hold with --cpu-bind cores.
	cores heldCores
	// rankLogs keeps the jobs' ranks' output; nil when none is kept.
	rankLogs    *ranklog.Store
	rankLogsErr error  // why rankLogs is nil, when it was asked for
	key         string // the node key: proves a registration is this agent's

	ctx    context.Context // ends when the agent has closed
	cancel context.CancelFunc
	// sendCtx ends with ctx, or earlier when the store will not come back
	// (StoreGone): the jobs' events are sent until it ends.
	sendCtx   context.Context
	storeGone context.CancelFunc

	smu     sync.Mutex
	session string
	storeID string
	// storeAddr is where the store is now: cfg.StoreAddr, until it moves
	// (or the client follows a replicated store's leader).
	storeAddr string
	lease     lease // fence.go

	mu      sync.Mutex
	closing bool                      // Close began: no job starts
	spare   *supervise.Spare          // cfg.Spare until a job takes it
	jobs    map[string]*jobRun        // by job ID
	ports   map[string][]net.Listener // by round
	// torchStores are the jobs' TCPStores this node serves, by job, all
	// within torchConns (torchstore.go).
	torchStores map[string]*torchStore
	torchConns  *tcpstore.ConnLimit
	torchBytes  *kv.Budget
	wg          sync.WaitGroup // jobs; Add under mu, never once closing
	loops       sync.WaitGroup // the session loop, the lease's, and the clean-up
	cmds        sync.WaitGroup // the command queues' goroutines; Add by the session loop only
	logSends    sync.WaitGroup // answers to SendLogs; Add by the command queues only
	// stepHook and undoHook, when set, are called ahead of each step of a
	// job's start and each undo: tests hold a start there, or watch its end.
	stepHook, undoHook func(job, step string)

	qmu    sync.Mutex
	queues map[string][]func() // each job's commands not yet run, while it has any
	// checking ends, by job, the health check of a start under way: a stop
	// queued behind the start need not wait for the check (health.go).
	checking map[string]context.CancelFunc

	xids        *gpu.XIDLog // the GPUs' recent XID errors
	xidsWatched bool        // watchXIDs took Config.XIDs, which it closes
	cgroupOnce  sync.Once   // cgroups.go
	cgroups     *cgroup.Root
	cgroupErr   error

	ncclOnce    sync.Once
	ncclVersion int

	gpusChanged chan struct{} // see GPUsChanged
	connected   atomic.Bool   // registered, its Watch stream in place (Connected)
	leaving     atomic.Bool   // shutting down: its view of its peers no longer counts (PeerLost)
	closeOnce   sync.Once
}

// jobRun is one job on this node: its assignment, workers and events.
type jobRun struct {
	asg     *musterv1.Assignment
	since   time.Time // when the assignment came
	storeID string    // the store that assigned it
	sup     *Supervisor
	pub     *jobPublisher
	ended   chan struct{} // closed once the run is no longer in Agent.jobs
}

// nameTakenWait is how long a starting agent waits for its name to be freed
// by a previous agent of the node that just went away.
const nameTakenWait = 5 * time.Second

// Start registers with the store and begins taking assignments. The agent is
// ready for jobs once Start returns: registered, and its Watch stream in
// place. It fails when the first registration does; later, a lost
// store is reconnected to, however long that takes (see session.go). ctx
// bounds the start only. A failed Start undoes what it made, and closes
// what the agent owns from the call: Spare, XIDs and GPUHealth.
func Start(ctx context.Context, cfg Config) (_ *Agent, err error) {
	a := newAgent(withDefaults(cfg))
	defer func() {
		if err != nil {
			a.undoStart()
		}
	}()
	if _, err := netip.ParseAddr(a.cfg.Addr); err != nil {
		return nil, fmt.Errorf("--addr %q is not an IP address", a.cfg.Addr)
	}
	a.openGPUHealth()
	if err := prepareTempDir(a.cfg.TempDir); err != nil {
		return nil, err
	}
	a.openRankLogs()
	if a.client, err = storeclient.DialAgent(a.cfg.StoreAddr, a.cfg.Security); err != nil {
		return nil, err
	}
	a.client.LearnReplicas(a.cfg.StoreReplicas)
	a.node, a.topo = describeNode(a.cfg)
	a.watchXIDs()
	watch, stop, err := a.firstRegister(ctx)
	if err != nil {
		return nil, fmt.Errorf("register with store %s: %s", a.cfg.StoreAddr, storeclient.ErrorMessage(err))
	}
	a.loops.Add(3)
	go a.sessionLoop(watch, stop)
	go a.keepLease()
	// What crashes left goes meanwhile: it never holds up registration.
	go func() { defer a.loops.Done(); removeStaleJobDirs(a.log, a.cfg.TempDir) }()
	a.log.Info("agent registered", zap.String("node", a.cfg.Name), zap.String("addr", a.cfg.Addr),
		zap.String("store", a.cfg.StoreAddr), zap.Int("gpus", len(a.cfg.GPUs)))
	return a, nil
}

// withDefaults fills in what cfg leaves unset.
func withDefaults(cfg Config) Config {
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
		cfg.TempDir = DefaultTempDir()
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 15 * time.Second
	}
	return cfg
}

// newAgent is an agent for cfg that holds nothing yet but what its caller
// gave it.
func newAgent(cfg Config) *Agent {
	actx, cancel := context.WithCancel(context.Background())
	a := &Agent{
		cfg: cfg, log: cfg.Logger, storeAddr: cfg.StoreAddr, key: newNodeKey(), ctx: actx, cancel: cancel, spare: cfg.Spare,
		jobs:        map[string]*jobRun{},
		ports:       map[string][]net.Listener{},
		torchStores: map[string]*torchStore{},
		queues:      map[string][]func(){},
		checking:    map[string]context.CancelFunc{},
		torchConns:  torchConnLimit(),
		torchBytes:  kv.NewBudget(torchStoreBytes, "this agent's TCPStores"),
		gpusChanged: make(chan struct{}, 1),
		xids:        &gpu.XIDLog{},
	}
	a.sendCtx, a.storeGone = context.WithCancel(actx)
	return a
}

// openGPUHealth makes the GPU check when none is given. A node without
// GPUs, or with declared ones, passes at once. The NVML session opens now,
// to see XID errors before the first round.
func (a *Agent) openGPUHealth() {
	if a.cfg.GPUHealth != nil {
		return
	}
	c := gpu.NewChecker(a.cfg.GPUs)
	if err := c.Open(); err != nil {
		a.log.Warn("GPU health", zap.Error(err))
	}
	a.cfg.GPUHealth = c
}

// openRankLogs opens where the jobs' ranks' output is kept, a directory
// per node: agents sharing a machine keep theirs apart. Workers run
// without it: only `launcher logs` misses their output, and says why.
func (a *Agent) openRankLogs() {
	if a.cfg.RankLogs.Dir == "" {
		return
	}
	kc := a.cfg.RankLogs
	kc.Dir = filepath.Join(kc.Dir, nodeDirName(a.cfg.Name))
	if a.rankLogs, a.rankLogsErr = ranklog.Open(a.log, kc); a.rankLogsErr != nil {
		a.log.Warn("keeping no rank output", zap.Error(a.rankLogsErr))
	}
}

// describeNode is the node as it registers: its address, GPUs, CPUs and
// topology, read once; and the topology, which each worker's binding
// comes from.
func describeNode(cfg Config) (*musterv1.Node, *topology.Topology) {
	topo := topology.Read(cmp.Or(cfg.TopologyRoot, "/"))
	// NumCPU counts the CPUs the process may run on (its affinity mask).
	node := &musterv1.Node{Name: cfg.Name, Addr: cfg.Addr, Rank: cfg.Rank, GpuError: cfg.GPUError, Cpus: int32(runtime.NumCPU()),
		Topology: topo.Proto(), Fabric: cfg.Fabric.Proto()}
	for _, d := range cfg.GPUs {
		node.Gpus = append(node.Gpus, &musterv1.GPU{Index: int32(d.Index), Uuid: d.UUID, Name: d.Name, MemoryBytes: d.MemoryBytes})
	}
	return node, topo
}

// firstRegister registers with the store for Start. The name may still be
// held by this node's previous agent, whose end the store has yet to see:
// it waits a little for it, then gives up. A replicated store without a
// leader is waited for as long as ctx allows: this node may host one of
// the replicas it needs for one.
func (a *Agent) firstRegister(ctx context.Context) (musterv1.Agents_WatchClient, context.CancelFunc, error) {
	watch, stop, err := a.registerLeader(ctx)
	var logged time.Time
	retry := time.NewTicker(250 * time.Millisecond)
	defer retry.Stop()
	for deadline := time.Now().Add(nameTakenWait); (status.Code(err) == codes.PermissionDenied && time.Now().Before(deadline)) || a.electing(err); {
		if a.electing(err) && time.Since(logged) >= logEvery/6 {
			logged = time.Now()
			a.log.Info("waiting for the store's replicas to elect a leader", zap.String("error", storeclient.ErrorMessage(err)))
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-retry.C:
		}
		watch, stop, err = a.registerLeader(ctx)
	}
	return watch, stop, err
}

// undoStart closes what a failed Start made, and what the agent owns from
// the call, waiting for its goroutines closeJoinTimeout at most.
func (a *Agent) undoStart() {
	a.cancel()
	if !waitFor(&a.loops, closeJoinTimeout) {
		a.log.Warn("agent: its goroutines did not end")
	}
	if !a.xidsWatched && a.cfg.XIDs != nil {
		a.cfg.XIDs.Close()
	}
	a.closeOwned()
}

// closeOwned closes the shim started ahead when no job took it, the GPU
// check and the connection to the store.
func (a *Agent) closeOwned() {
	a.mu.Lock()
	spare := a.spare
	a.spare = nil
	a.mu.Unlock()
	if spare != nil {
		spare.Close()
	}
	if c, ok := a.cfg.GPUHealth.(interface{ Close() }); ok {
		c.Close()
	}
	if a.client != nil {
		a.client.Close()
	}
}

// serve carries out the commands of one Watch stream until it ends: each
// job's in order, apart from other jobs', so that a slow start or a slow
// store holds up no other job's stop.
func (a *Agent) serve(watch musterv1.Agents_WatchClient) error {
	for {
		cmd, err := watch.Recv()
		if err != nil {
			return err
		}
		switch c := cmd.GetCommand().(type) {
		case *musterv1.AgentCommand_ReservePorts:
			a.queue(c.ReservePorts.GetJobId(), func() { a.reservePorts(a.ctx, c.ReservePorts) })
		case *musterv1.AgentCommand_Start:
			a.queue(c.Start.GetJobId(), func() { a.startJob(a.ctx, c.Start) })
		case *musterv1.AgentCommand_Stop:
			a.endHealthCheck(c.Stop.GetJobId())
			a.queue(c.Stop.GetJobId(), func() { a.stopJob(c.Stop) })
		case *musterv1.AgentCommand_ReleaseStore:
			a.queue(c.ReleaseStore.GetJobId(), func() { a.releaseTorchStore(c.ReleaseStore.GetJobId()) })
		case *musterv1.AgentCommand_CollectHangClues:
			// Apart from the job's queue: a hang's clues must not wait
			// behind the job's other commands.
			go a.collectHangClues(c.CollectHangClues)
		case *musterv1.AgentCommand_ProbePeer:
			go a.probePeer(c.ProbePeer)
		case *musterv1.AgentCommand_CheckTorchConns:
			// Ranks wait on the answer: it waits for no other command. The
			// store bounds the questions waiting for this node.
			go a.answerTorchConns(c.CheckTorchConns)
		case *musterv1.AgentCommand_SendLogs:
			// After the job's start, if it was sent before: a follow then
			// finds the job's ranks here.
			// Its answer runs apart: a long --follow holds up no other
			// command, nor registering again.
			a.queue(c.SendLogs.GetJobId(), func() {
				a.logSends.Add(1)
				go func() { defer a.logSends.Done(); a.sendLogs(c.SendLogs) }()
			})
		case *musterv1.AgentCommand_Signal:
			sent := time.Now()
			a.queue(c.Signal.GetJobId(), func() { a.signalJob(c.Signal, sent) })
		}
	}
}

// queue runs fn after the job's commands queued before it, in a goroutine
// of the job's own while it has commands to run.
func (a *Agent) queue(job string, fn func()) {
	a.qmu.Lock()
	q, running := a.queues[job]
	a.queues[job] = append(q, fn)
	a.qmu.Unlock()
	if !running {
		a.cmds.Add(1)
		go a.drain(job)
	}
}

// drain runs the job's queued commands until none is left.
func (a *Agent) drain(job string) {
	defer a.cmds.Done()
	for {
		a.qmu.Lock()
		q := a.queues[job]
		if len(q) == 0 {
			delete(a.queues, job)
			a.qmu.Unlock()
			return
		}
		a.queues[job] = q[1:]
		a.qmu.Unlock()
		q[0]()
	}
}

// stepHooks call the test hooks, if any, ahead of each step of job's
// start and each undo.
func (a *Agent) stepHooks(job string) stepHooks {
	a.mu.Lock()
	do, undo := a.stepHook, a.undoHook
	a.mu.Unlock()
	var hooks stepHooks
	if do != nil {
		hooks.do = func(name string) { do(job, name) }
	}
	if undo != nil {
		hooks.undo = func(name string) { undo(job, name) }
	}
	return hooks
}

func (a *Agent) stopJob(st *musterv1.StopJob) {
	a.mu.Lock()
	r := a.jobs[st.GetJobId()]
	a.mu.Unlock()
	if r != nil {
		a.log.Info("stopping job", zap.String("job", st.GetJobId()), zap.String("reason", st.GetReason()))
		grace := time.Duration(st.GetKillTimeoutMs()) * time.Millisecond
		if st.GetDumpFirst() || len(st.GetAbortRanks()) > 0 {
			r.sup.StopForHang(grace, st.GetAbortRanks(), st.GetDumpFirst())
			return
		}
		r.sup.Stop(grace)
	}
}

// collectHangClues gathers this node's clues to a hang of a job's round.
func (a *Agent) collectHangClues(c *musterv1.CollectHangClues) {
	a.mu.Lock()
	r := a.jobs[c.GetJobId()]
	a.mu.Unlock()
	if r != nil && r.asg.GetRoundId() == c.GetRoundId() {
		r.sup.CollectHangClues()
	}
}

// signalJob sends a signal to this node's workers of a job.
func (a *Agent) signalJob(sj *musterv1.SignalJob, sent time.Time) {
	if !jobspec.MayForward(sj.GetSignal()) {
		a.log.Warn("signal refused", zap.String("job", sj.GetJobId()), zap.Int32("signal", sj.GetSignal()))
		return
	}
	a.mu.Lock()
	r := a.jobs[sj.GetJobId()]
	a.mu.Unlock()
	if r != nil {
		r.sup.Signal(syscall.Signal(sj.GetSignal()), sent)
	}
}

// stopAll stops every job here because this agent goes away, for reason.
// Each job's workers get its own --kill-timeout, at most grace.
func (a *Agent) stopAll(grace time.Duration, reason string) {
	a.mu.Lock()
	jobs := make([]*jobRun, 0, len(a.jobs))
	for _, r := range a.jobs {
		jobs = append(jobs, r)
	}
	a.mu.Unlock()
	for _, r := range jobs {
		r.sup.Shutdown(min(grace, time.Duration(r.asg.GetSpec().GetKillTimeoutMs())*time.Millisecond), reason)
		a.endHealthCheck(r.asg.GetJobId())
	}
}

// startJob starts this node's workers of an assignment.
func (a *Agent) startJob(ctx context.Context, asg *musterv1.Assignment) {
	// Other nodes' ranks may connect before this node's start: they wait for this.
	a.allowTorchStoreUsers(asg)
	spec := asg.GetSpec()
	kill := time.Duration(spec.GetKillTimeoutMs()) * time.Millisecond
	a.mu.Lock()
	if old := a.jobs[asg.GetJobId()]; old != nil && !a.closing && old.asg.GetRoundId() != asg.GetRoundId() {
		// The job's next round: the last round's events are still on their
		// way to the store (its publisher numbers from 1), so it waits.
		a.mu.Unlock()
		go func() {
			select {
			case <-old.ended:
				a.startJob(ctx, asg)
			case <-ctx.Done():
			}
		}()
		return
	}
	if a.closing || a.jobs[asg.GetJobId()] != nil {
		a.mu.Unlock()
		a.log.Warn("assignment not started", zap.String("job", asg.GetJobId()), zap.Bool("closing", a.closing))
		a.releasePorts(asg.GetRoundId())
		return
	}
	pub := newJobPublisher(a.sendCtx, a.log, a.client, a.sessionID, asg.GetJobId())
	sup := newSupervisor(a.log, asg.GetJobId(), a.cfg.Name, kill, pub)
	sup.xids = a.xids
	run := &jobRun{asg: asg, since: time.Now(), storeID: a.currentStore(), sup: sup, pub: pub, ended: make(chan struct{})}
	a.jobs[asg.GetJobId()] = run
	a.wg.Add(1)
	a.mu.Unlock()
	a.signalGPUs()
	go pub.run()
	js := &jobStart{a: a, asg: asg, sup: sup}
	steps, hooks := js.steps(), a.stepHooks(asg.GetJobId())
	err := runSteps(steps, hooks)
	go func() {
		defer a.wg.Done()
		if err != nil {
			a.log.Warn("job cannot start", zap.String("job", asg.GetJobId()), zap.Error(err))
			// Report every local worker as failed to start, so the job ends.
			st := exitStatus{code: 1, err: validText(err.Error())}
			if errors.Is(err, errStopping) {
				st = exitStatus{signal: int(syscall.SIGTERM)}
			}
			for _, pl := range unplannedWorkers(asg) {
				sup.exited(pl, st, nil, "", time.Time{})
			}
		} else {
			sup.run(ctx, js)
			undoSteps(steps, hooks)
		}
		// The job's last events reach the store before it counts as ended here.
		pub.close()
		a.mu.Lock()
		delete(a.jobs, asg.GetJobId())
		a.mu.Unlock()
		close(run.ended)
		a.signalGPUs()
	}()
}

// closeJoinTimeout bounds how long Close waits for its goroutines once it
// has cancelled everything.
const closeJoinTimeout = 5 * time.Second

// Close stops the agent, in order: (1) it takes no more jobs and tells the
// store it leaves (leave.go), so that no round takes its node; (2) every
// job's workers get SIGTERM, then SIGKILL after the job's kill timeout (at
// most grace), and count as failed because the agent shut down; (3) it waits
// for them and for their last events to reach the store, at most
// ShutdownTimeout past the grace; (4) it
// drops what is still unsent, ends its session and waits for its
// goroutines, at most closeJoinTimeout; (5) it releases held ports, closes
// the jobs' TCPStores and closes its connection. Calling it again does nothing.
func (a *Agent) Close(grace time.Duration) error {
	var err error
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closing = true
		a.mu.Unlock()
		a.leave()
		a.stopAll(grace, fmt.Sprintf("the agent on node %s shut down", a.cfg.Name))
		if !waitFor(&a.wg, grace+a.cfg.ShutdownTimeout) {
			err = errors.New("agent: workers or their events still pending after SIGKILL")
		}
		a.cancel()
		// The loops end after the command queues, which alone start
		// answers to SendLogs: none starts once they are waited for.
		if !waitFor(&a.loops, closeJoinTimeout) || !waitFor(&a.wg, closeJoinTimeout) || !waitFor(&a.logSends, closeJoinTimeout) {
			err = errors.Join(err, errors.New("agent: its goroutines did not end"))
		}
		a.mu.Lock()
		rounds := slices.Collect(maps.Keys(a.ports))
		jobs := slices.Collect(maps.Keys(a.torchStores))
		a.mu.Unlock()
		for _, round := range rounds {
			a.releasePorts(round)
		}
		for _, job := range jobs {
			a.releaseTorchStore(job)
		}
		a.closeOwned()
	})
	return err
}

// takeSpare gives the shim started ahead to the first job that asks.
func (a *Agent) takeSpare() *supervise.Spare {
	a.mu.Lock()
	defer a.mu.Unlock()
	sp := a.spare
	a.spare = nil
	return sp
}

// waitFor waits for wg at most d, and says whether it ended.
func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// watchXIDs records the GPUs' XID errors for the agent's life, so that a
// worker that dies of one is reported so. Declared GPUs (no NVML) have none.
func (a *Agent) watchXIDs() {
	src := a.cfg.XIDs
	if src == nil {
		var indices []int
		for _, d := range a.cfg.GPUs {
			if d.UUID != "" {
				indices = append(indices, d.Index)
			}
		}
		if len(indices) == 0 {
			return
		}
		var err error
		if src, err = gpu.WatchXIDs(indices); err != nil {
			a.log.Warn("GPUs' XID errors not watched: a worker that dies of one is not reported so", zap.Error(err))
			return
		}
	}
	// Run closes src when it ends.
	a.xidsWatched = true
	a.loops.Add(1)
	go func() {
		defer a.loops.Done()
		if err := a.xids.Run(a.ctx, src); a.ctx.Err() == nil {
			a.log.Warn("GPUs' XID errors no longer watched", zap.Error(err))
		}
	}()
}
