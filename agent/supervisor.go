package agent

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/cgroup"
	"github.com/musterhq/muster/failure"
	"github.com/musterhq/muster/gpu"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/ranklog"
	"github.com/musterhq/muster/supervise"
	"github.com/musterhq/muster/torcherror"
)

// cutAfter bounds reading a worker's pipes once every process of the job has
// ended or was given up on: only a process that outlived SIGKILL holds them.
const cutAfter = 2 * time.Second

// Supervisor runs one job's workers on this node: it starts them, reports
// their output and exits, and stops them all on the first failure
// (SIGTERM, the kill timeout, then SIGKILL).
type Supervisor struct {
	log    *zap.Logger
	job    string
	node   string
	pub    *jobPublisher
	killAt time.Duration // the job's kill timeout

	mu       sync.Mutex
	group    *supervise.Group
	started  time.Time // when group started
	stopping bool
	// shutdown says why this agent itself stopped the job (it is shutting
	// down); its workers then count as failed, not as stopped by the store.
	shutdown string
	// exits are this node's ended workers, by rank, as reported.
	exits map[int32]*exitRecord
	// xids are the node's GPUs' XID errors, when they are watched.
	xids *gpu.XIDLog
	// watch, with a hang timeout, watches the workers' heartbeats (hang.go);
	// hangs are the workers it found hung, by rank.
	watch *hangWatch
	hangs map[int32]*musterv1.WorkerHang
}

// exitRecord is a worker's exit and the sequence number of its event (0
// until it is queued, or when it was dropped).
type exitRecord struct {
	ev  *musterv1.WorkerExited
	seq uint64
	at  time.Time
}

// workerPlan is one worker of the job on this node.
type workerPlan struct {
	rank, localRank int
	spec            workerSpec
	// gpus are the worker's share of the node's GPUs, those an XID error
	// of which it is reported to die of.
	gpus []int
	// binding is where it runs: what the shim binds, and what its start
	// reports (nil when the node's topology was not read).
	binding workerBinding
	// errorFile is its TORCHELASTIC_ERROR_FILE when the agent chose it
	// (read after a failure); "" when the user chose another.
	errorFile string
}

func newSupervisor(log *zap.Logger, job, node string, killTimeout time.Duration, pub *jobPublisher) *Supervisor {
	return &Supervisor{log: log, job: job, node: node, killAt: killTimeout, pub: pub,
		exits: map[int32]*exitRecord{}}
}

// worker is one running worker's plumbing.
type worker struct {
	plan    workerPlan
	logs    [2]*logFile     // --log-dir's files, by stream: stdout, stderr
	kept    *ranklog.Writer // the node's kept output, for `launcher logs`
	errTail tail
	readers [2]*supervise.Reader
	path    string
	// exit holds the exit of a worker that never started, until run.
	exit chan exitStatus
	// pending counts what its exit's report waits for: the exit and the
	// ends of its two streams; status is the exit, once it came.
	pending atomic.Int32
	status  exitStatus
	pmi     *pmiConn       // an MPI worker's PMI connection
	cgroup  *cgroup.Worker // its cgroup, when the agent makes them
	started time.Time      // when its start began: XID errors after it are its
	watch   *rankWatch     // its heartbeat, with a hang timeout
}

// facts gathers what the kernel and the GPUs said of the worker's end: its
// cgroup's OOM kills and refused forks, read once it has been reaped, and
// the XID errors of its GPUs since it started.
func (w *worker) facts(xids *gpu.XIDLog) *failure.Facts {
	f := &failure.Facts{}
	if w.cgroup != nil {
		f.OOMKills, _ = w.cgroup.OOMKills()
		f.MemoryLimit, f.PidsRefused = w.cgroup.Limit(), w.cgroup.PidsRefused()
	}
	for _, ev := range xids.Since(w.plan.gpus, w.started) {
		f.XIDs = append(f.XIDs, failure.XID{GPU: int32(ev.GPU), Code: ev.XID})
	}
	return f
}

// run reports the started workers' output and exits and returns once every
// one has ended and been reported, and every process they started is gone.
// The job directory goes with the last of them, even if the agent dies
// first. With an MPI job, each worker speaks PMI to its service on fd 3.
func (s *Supervisor) run(ctx context.Context, js *jobStart) {
	workers, started, g := js.workers, js.started, js.group
	var reported sync.WaitGroup
	reported.Add(len(workers))
	// arrive counts in one of a worker's exit and the ends of its two
	// streams; the last of them reports the exit, after its last byte of
	// output, so that no goroutine of its own waits for them.
	arrive := func(w *worker) {
		if w.pending.Add(-1) == 0 {
			// Its output is all read: its log file is as complete as it gets.
			s.exited(w.plan, w.status, w.errTail.get(), w.incomplete(), w.started)
			reported.Done()
		}
	}
	ended := func(w *worker, st exitStatus) {
		if w.pmi == nil {
			w.status = st
			arrive(w)
			return
		}
		// Its PMI connection's word may take a moment: the events go on.
		go func() {
			w.status = w.pmi.outcome(st)
			arrive(w)
		}()
	}
	for _, w := range workers {
		if w.pmi != nil {
			s.servePMI(ctx, js.mpi.job, w.pmi, w.plan.rank)
		}
		w.pending.Store(3)
		go func() { s.readOutput(w, 0); arrive(w) }()
		go func() { s.readOutput(w, 1); arrive(w) }()
		select {
		case st := <-w.exit: // a worker that never started
			ended(w, st)
		default:
		}
	}
	got := make([]bool, len(started))
	for ev := range g.Events() {
		w := started[ev.Index]
		if ev.Kind == supervise.Started {
			if w.watch != nil {
				w.watch.pid.Store(int32(ev.Pid))
			}
			w.plan.binding.applied(ev.CPUErr, ev.MemErr)
			s.pub.publish(&musterv1.JobEvent{JobId: s.job, Event: &musterv1.JobEvent_Started{Started: &musterv1.WorkerStarted{
				Rank: int32(w.plan.rank), LocalRank: int32(w.plan.localRank), Node: s.node, Pid: int32(ev.Pid), Binding: w.plan.binding.report}}})
			continue
		}
		st := exitStatus{code: ev.Code, signal: ev.Signal}
		if ev.Kind == supervise.StartFailed {
			st = execError(w.plan.spec.argv[0], w.path, w.plan.spec.dir, ev.Err)
		} else {
			st.facts = w.facts(s.xids)
		}
		if w.watch != nil {
			w.watch.ended.Store(true)
		}
		got[ev.Index] = true
		ended(w, st)
	}
	note := g.Note()
	if note != "" {
		s.log.Warn("job processes", zap.String("job", s.job), zap.String("note", note))
	}
	for i, w := range started {
		if !got[i] {
			ended(w, exitStatus{code: 1, err: note})
		}
	}
	cut := time.AfterFunc(cutAfter, func() { closeReaders(workers) })
	reported.Wait()
	cut.Stop()
}

// readOutput reads one of a worker's streams: into its log file, its kept
// output, its stderr tail, and the job's events, in that order; a slow store
// slows the worker.
func (s *Supervisor) readOutput(w *worker, i int) {
	stream := musterv1.Stream_STREAM_STDOUT
	if i == 1 {
		stream = musterv1.Stream_STREAM_STDERR
	}
	err := w.readers[i].Read(func(data []byte, paused bool) {
		if w.watch != nil {
			// A slow reader downstream blocks the worker's writes: no hang.
			w.watch.hold()
			defer w.watch.release()
		}
		if w.logs[i] != nil {
			w.logs[i].write(data)
		}
		if w.kept != nil {
			w.kept.Append(int(stream), data, paused)
		}
		if i == 1 {
			w.errTail.add(data)
		}
		if w.watch != nil {
			w.watch.output()
		}
		s.pub.publish(&musterv1.JobEvent{JobId: s.job, Event: &musterv1.JobEvent_Output{Output: &musterv1.Output{
			Rank: int32(w.plan.rank), Stream: stream, Data: bytes.Clone(data), Paused: paused}}})
	})
	if err != nil {
		s.log.Warn("worker output cut", zap.String("job", s.job), zap.Int("rank", w.plan.rank), zap.Error(err))
	}
}

// incomplete says why the worker's --log-dir files miss output; "" when
// they do not.
func (w *worker) incomplete() string {
	for _, lf := range w.logs {
		if why := lf.incomplete(); why != "" {
			return why
		}
	}
	return ""
}

func closeReaders(workers []*worker) {
	for _, w := range workers {
		for _, r := range w.readers {
			if r != nil {
				r.Cut()
			}
		}
	}
}

// execError is a worker's failure to exec path in dir, as its shim reported it.
func execError(argv0, path, dir string, err error) exitStatus {
	return startError(argv0, dir, &fs.PathError{Op: "fork/exec", Path: path, Err: err})
}

// exited reports a worker's end, and why its --log-dir file misses output
// if it does; a failure stops the rest of the job here at once, before the
// store tells every node.
func (s *Supervisor) exited(pl workerPlan, st exitStatus, stderrTail []string, logIncomplete string, started time.Time) {
	s.mu.Lock()
	// A rank that called MPI_Abort failed by itself, though the stop it
	// asked for killed it.
	// A hung worker fails the job, however the stop that followed ended it.
	hang := s.hangs[int32(pl.rank)]
	stopped := s.stopping && s.shutdown == "" && !st.aborted && hang == nil
	if s.shutdown != "" && st.failed() && st.err == "" {
		st.err = s.shutdown
	}
	s.mu.Unlock()
	ev := &musterv1.WorkerExited{Rank: int32(pl.rank), LocalRank: int32(pl.localRank), Node: s.node,
		ExitCode: int32(st.code), Signal: int32(st.signal), StderrTail: stderrTail, Stopped: stopped, Error: st.err,
		LogIncomplete: logIncomplete, Hang: hang}
	if st.facts != nil {
		failure.Explain(ev, *st.facts)
	}
	if st.failed() && pl.errorFile != "" {
		ev.PythonError = s.pythonError(pl, started)
	}
	s.log.Info("worker exited", zap.String("job", s.job), zap.Int("rank", pl.rank), zap.Int("exit-code", st.code),
		zap.Int("signal", st.signal), zap.Bool("stopped", stopped), zap.String("error", st.err), zap.String("log-incomplete", logIncomplete),
		zap.Stringer("cause", ev.GetCause()))
	// Recorded before it is queued: a report never says a worker runs once
	// the store may have its exit.
	rec := &exitRecord{ev: ev, at: time.Now()}
	s.mu.Lock()
	s.exits[ev.Rank] = rec
	s.mu.Unlock()
	seq := s.pub.publish(&musterv1.JobEvent{JobId: s.job, Event: &musterv1.JobEvent_Exited{Exited: ev}})
	s.mu.Lock()
	rec.seq = seq
	s.mu.Unlock()
	if failure.Failed(ev) {
		s.Stop(s.killAt)
	}
}

// pythonError is the exception a failed worker's @record wrote to its
// error file since it started, if it wrote one.
func (s *Supervisor) pythonError(pl workerPlan, started time.Time) *musterv1.PythonError {
	// Opened as the job's user, who owns its directory.
	f, err := openFileAs(pl.spec.cred, pl.errorFile, torcherror.OpenFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // it raised nothing through @record
	}
	var e *torcherror.Error
	if err == nil {
		e, err = torcherror.Read(f, started)
		f.Close()
	}
	if err != nil {
		s.log.Info("error file not read", zap.String("job", s.job), zap.Int("rank", pl.rank), zap.Error(err))
	}
	if e == nil {
		return nil
	}
	return &musterv1.PythonError{Type: e.Type, Message: e.Message, Frames: e.Frames}
}

// rankStates reports the job's workers on this node, ranks first to
// first+n-1: running, or exited, and whether the store acknowledged the exit.
func (s *Supervisor) rankStates(first, n int32, acked uint64) []*musterv1.RankState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*musterv1.RankState, 0, n)
	for r := first; r < first+n; r++ {
		rs := &musterv1.RankState{Rank: r}
		if rec := s.exits[r]; rec != nil {
			rs.Exited, rs.Acked, rs.ExitedUnixMs = rec.ev, rec.seq != 0 && rec.seq <= acked, rec.at.UnixMilli()
		}
		out = append(out, rs)
	}
	return out
}

// isStopping says whether the job's workers are being stopped here.
func (s *Supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// setHang records that a worker was found hung, before it is stopped.
func (s *Supervisor) setHang(rank int, h *musterv1.WorkerHang) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hangs == nil {
		s.hangs = map[int32]*musterv1.WorkerHang{}
	}
	s.hangs[int32(rank)] = h
}

// Signal sends sig, which the agent got at sent, to each running worker's
// own process (SIGUSR1 before a preemption); before the workers start, to
// workers started since sent, or after they ended, it does nothing.
func (s *Supervisor) Signal(sig syscall.Signal, sent time.Time) {
	s.mu.Lock()
	g, started, stopping := s.group, s.started, s.stopping
	s.mu.Unlock()
	if g == nil || stopping || started.After(sent) {
		// Workers that started after it was sent have no handler for it
		// yet: a checkpoint signal would kill them.
		s.log.Info("signal not sent: no workers ran when it was sent", zap.String("job", s.job), zap.String("signal", unix.SignalName(sig)))
		return
	}
	if err := g.SignalLeaders(sig); err != nil {
		s.log.Info("signal not sent", zap.String("job", s.job), zap.String("signal", unix.SignalName(sig)), zap.Error(err))
	}
}

// StopForHang stops the job as Stop does, for a hang the store found: the
// ranks its verdict named are sent SIGABRT first (their stacks), and with
// dumpFirst PyTorch's flight recorders here are dumped before.
func (s *Supervisor) StopForHang(grace time.Duration, abort []int32, dumpFirst bool) {
	s.mu.Lock()
	g, watch, stopping := s.group, s.watch, s.stopping
	s.mu.Unlock()
	if g == nil || watch == nil || stopping {
		s.Stop(grace)
		return
	}
	if dumpFirst {
		before := watch.traceStamps()
		watch.waitDumps(g, watch.dumpFlightRecorders(), before)
	}
	watch.abortThenStop(g, abort, func() { s.Stop(grace) })
}

// CollectHangClues has the node's clues to a hang of the job gathered and
// published, for a hang another node found.
func (s *Supervisor) CollectHangClues() {
	s.mu.Lock()
	g, watch, stopping := s.group, s.watch, s.stopping
	s.mu.Unlock()
	if g != nil && watch != nil && !stopping {
		watch.collect(g)
	}
}

// Stop ends every worker: SIGTERM to each process group and every process
// they started, then SIGKILL after grace. Calling it again with a shorter
// grace kills sooner.
func (s *Supervisor) Stop(grace time.Duration) { s.stop(grace, "") }

// Shutdown stops the job because this agent is going away, or a node of the
// job was lost; its workers are reported as failed, for reason.
func (s *Supervisor) Shutdown(grace time.Duration, reason string) { s.stop(grace, reason) }

func (s *Supervisor) stop(grace time.Duration, shutdown string) {
	s.mu.Lock()
	s.stopping = true
	if shutdown != "" && s.shutdown == "" {
		s.shutdown = shutdown
	}
	g := s.group
	s.mu.Unlock()
	if g == nil {
		return // the workers have not started, and now will not
	}
	g.Stop(grace)
}
