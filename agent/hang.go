package agent

import (
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/envprop"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/supervise"
)

// A job with a hang timeout has each of its workers on this node watched:
// a worker that gives no heartbeat for the timeout (the first-heartbeat
// timeout before its first one) is hung. A heartbeat is any change of its
// heartbeat file (touch), or with hang_on_silence any output. For the
// timeout a heartbeat counts from when the watch saw it, on the agent's
// monotonic clock, so that neither a clock step nor coarse file times make
// a worker hung early; the file's own time (mtime) only orders the workers'
// last heartbeats for the verdict on who hung (clues.go).
const (
	// dumpWait bounds the wait for PyTorch to dump its flight recorders
	// once asked: its heartbeat monitor reads the pipe about once a second
	// (TORCH_NCCL_COORD_CHECK_MILSEC), and a dump asked for through the pipe
	// always symbolizes its entries' stacks, whatever TORCH_INCLUDE_STACK_TRACE
	// says: about 6 s with PyTorch 2.11. The wait ends once the dumps are whole.
	dumpWait = 10 * time.Second
	// abortWait is how long a hung worker has to print its stacks and die
	// of SIGABRT before the job is stopped around it.
	abortWait = time.Second
	// verdictWait bounds the wait for the store's verdict on a hang this
	// node found: past it the node stops its hung workers itself.
	verdictWait = dumpWait + 5*time.Second
)

// hangWatch watches one job's workers on this node.
type hangWatch struct {
	log            *zap.Logger
	sup            *Supervisor
	timeout, first time.Duration
	onSilence      bool
	tick           time.Duration
	epoch          time.Time
	ranks          []*rankWatch // by index in the group
	// dumped says the flight recorders were dumped: a second dump would
	// write over the first while the stop kills its writers.
	dumped atomic.Bool
	// round is the job's round here; ras, NCCL's RAS service of the job on
	// this node ("" when it has none).
	round, ras string
	// gather makes the node's clues once, whoever asks first (its own
	// watch, or the store for another node's hang).
	gather sync.Once
	// stopped is closed once the job is being stopped for a hang.
	stopped  chan struct{}
	stopOnce sync.Once
	// looking serializes looks at the heartbeat files: the watch's own,
	// and those of the clues and the abort, which run beside it.
	looking sync.Mutex
}

// rankWatch is one worker's heartbeat.
type rankWatch struct {
	h           *hangWatch
	rank, index int
	file        string   // its heartbeat file
	pipe        string   // PyTorch's dump pipe
	traces      []string // where PyTorch may dump its flight recorder
	seen        fileStamp
	last        atomic.Int64 // the last heartbeat seen, since epoch (ns)
	beatAt      atomic.Int64 // its own time: the file's mtime, Unix ns
	pid         atomic.Int32 // the worker's process, once started
	beat        atomic.Bool  // it gave one
	ended       atomic.Bool
	// held counts the agent's readers of its output that are blocked
	// passing it on (a slow launcher, a slow disk): a worker blocked
	// writing by that back-pressure is not hung.
	held atomic.Int32
}

// fileStamp is what changes when a file is touched or written.
type fileStamp struct {
	ok           bool
	ino          uint64
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(path string) fileStamp {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return fileStamp{}
	}
	return fileStamp{ok: true, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// watchTick is how often a watch looks: a twentieth of the shorter timeout,
// within 10 to 100 ms, so that a hang is found well within a second of its
// timeout and a heartbeat is placed to within a tick.
func watchTick(timeout, first time.Duration) time.Duration {
	return min(max(min(timeout, first)/20, 10*time.Millisecond), 100*time.Millisecond)
}

// newHangWatch makes the heartbeat files of a job's workers, as the job's
// user, and the watch over them; nil when the job has no hang timeout.
func newHangWatch(log *zap.Logger, spec *musterv1.JobSpec, workers []*worker, cred *syscall.Credential) (*hangWatch, error) {
	if spec.GetHangTimeoutMs() <= 0 {
		return nil, nil
	}
	timeout := time.Duration(spec.GetHangTimeoutMs()) * time.Millisecond
	first := timeout
	if ms := spec.GetHangFirstTimeoutMs(); ms > 0 {
		first = time.Duration(ms) * time.Millisecond
	}
	h := &hangWatch{log: log, timeout: timeout, first: first, onSilence: spec.GetHangOnSilence(), tick: watchTick(timeout, first),
		stopped: make(chan struct{})}
	for _, w := range workers {
		env := w.plan.spec.env
		file, _ := envprop.Lookup(env, envprop.HeartbeatFile)
		f, err := openFileAs(cred, file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		f.Close()
		r := &rankWatch{h: h, rank: w.plan.rank, index: -1, file: file,
			pipe: envprop.TorchDumpPipePath(env, w.plan.rank), traces: envprop.TorchDumpPaths(env, w.plan.rank)}
		r.seen = stampOf(file)
		r.beatAt.Store(r.seen.mtime.Nano())
		w.watch = r
		h.ranks = append(h.ranks, r)
	}
	return h, nil
}

// progress records a heartbeat of the worker now.
func (r *rankWatch) progress() {
	r.last.Store(int64(time.Since(r.h.epoch)))
	r.beat.Store(true)
}

// hold and release bracket the agent's passing on of a piece of the
// worker's output; the time between counts as progress.
func (r *rankWatch) hold() { r.held.Add(1) }

func (r *rankWatch) release() {
	r.last.Store(int64(time.Since(r.h.epoch)))
	r.held.Add(-1)
}

// output is a worker's output: a heartbeat under hang_on_silence.
func (r *rankWatch) output() {
	if r.h.onSilence {
		r.progress()
		r.beatAt.Store(time.Now().UnixNano())
	}
}

// start begins the watch of the started workers (in the group's order), from now.
func (h *hangWatch) start(started []*worker, g *supervise.Group) {
	for i, w := range started {
		if w.watch != nil {
			w.watch.index = i
		}
	}
	go h.run(g)
}

// run watches until the job's processes are gone or stop, or until it
// finds a hang: then it gathers this node's clues for the store's verdict.
// A worker that lingers in a stop's grace is no hang.
func (h *hangWatch) run(g *supervise.Group) {
	t := time.NewTicker(h.tick)
	defer t.Stop()
	for {
		select {
		case <-g.Done():
			return
		case <-t.C:
		}
		if h.sup.isStopping() {
			return
		}
		if hung := h.check(); len(hung) > 0 {
			for _, x := range hung {
				h.log.Warn("worker hung", zap.String("job", h.sup.job), zap.Int("rank", x.r.rank),
					zap.Int64("silent-ms", x.hang.GetSilentMs()), zap.Bool("never-beat", x.hang.GetNeverBeat()))
			}
			h.report(g)
			h.fallback(g, hung)
			return
		}
	}
}

// hungRank is a worker found hung, and its report.
type hungRank struct {
	r    *rankWatch
	hang *musterv1.WorkerHang
}

// check looks at every running worker's heartbeat and returns the hung ones.
func (h *hangWatch) check() []hungRank {
	now := time.Since(h.epoch)
	var hung []hungRank
	for _, r := range h.ranks {
		if r.ended.Load() || r.index < 0 {
			continue
		}
		if h := r.look(now); h != nil {
			hung = append(hung, hungRank{r, h})
		}
	}
	for _, x := range hung {
		for _, y := range hung {
			if y.r != x.r {
				x.hang.AlsoHung = append(x.hang.AlsoHung, int32(y.r.rank))
			}
		}
	}
	return hung
}

// look takes in a change of the worker's heartbeat file and says whether it
// is past its timeout now, and by how much.
func (r *rankWatch) look(now time.Duration) *musterv1.WorkerHang {
	r.h.looking.Lock()
	defer r.h.looking.Unlock()
	if st := stampOf(r.file); st != r.seen {
		r.seen = st
		r.progress()
		r.beatAt.Store(st.mtime.Nano())
	}
	if r.held.Load() > 0 {
		r.last.Store(int64(now)) // held up by the agent, not hung
		return nil
	}
	silent := now - time.Duration(r.last.Load())
	limit, never := r.h.timeout, !r.beat.Load()
	if never {
		limit = r.h.first
	}
	if silent <= limit {
		return nil
	}
	return &musterv1.WorkerHang{SilentMs: silent.Milliseconds(), TimeoutMs: limit.Milliseconds(), NeverBeat: never}
}

// fallback aborts the hung workers itself when the store's verdict does not
// come in time (no store reached): its stop ends the job here.
func (h *hangWatch) fallback(g *supervise.Group, hung []hungRank) {
	t := time.NewTimer(verdictWait)
	defer t.Stop()
	select {
	case <-g.Done():
		return
	case <-h.stopped:
		return
	case <-t.C:
	}
	h.log.Warn("no verdict on the hang from the store: stopping the hung workers here", zap.String("job", h.sup.job))
	var ranks []int32
	for _, x := range hung {
		h.sup.setHang(x.r.rank, x.hang)
		ranks = append(ranks, int32(x.r.rank))
	}
	h.abortThenStop(g, ranks, func() { h.sup.Stop(h.sup.killAt) })
}

// abortThenStop sends SIGABRT to those of ranks that run here, so that a
// Python worker prints its stacks, waits for them to end (abortWait at
// most), then stops the job here.
func (h *hangWatch) abortThenStop(g *supervise.Group, ranks []int32, stop func()) {
	h.stopOnce.Do(func() { close(h.stopped) })
	aborted := false
	now := time.Since(h.epoch)
	for _, r := range h.ranks {
		if r.ended.Load() || r.index < 0 || !slices.Contains(ranks, int32(r.rank)) {
			continue
		}
		hang := r.look(now)
		if hang == nil {
			hang = &musterv1.WorkerHang{SilentMs: (now - time.Duration(r.last.Load())).Milliseconds(), TimeoutMs: h.timeout.Milliseconds()}
		}
		h.sup.setHang(r.rank, hang)
		if err := g.Abort(r.index); err != nil {
			h.log.Info("hung worker not aborted", zap.String("job", h.sup.job), zap.Int("rank", r.rank), zap.Error(err))
		}
		// A stopped worker (SIGSTOP, a debugger's stop) takes its SIGABRT
		// only once it runs again.
		_ = g.Signal(r.index, syscall.SIGCONT)
		aborted = true
	}
	if aborted {
		t := time.NewTimer(abortWait)
		defer t.Stop()
		select {
		case <-g.Done():
		case <-t.C:
			// A worker that ignored SIGABRT, or one that dumps slowly.
		}
	}
	stop()
}

// traceStamps are the workers' flight recorder files as they are now.
func (h *hangWatch) traceStamps() map[*rankWatch][]fileStamp {
	before := map[*rankWatch][]fileStamp{}
	for _, r := range h.ranks {
		before[r] = r.traceStamps()
	}
	return before
}

func (r *rankWatch) traceStamps() []fileStamp {
	st := make([]fileStamp, len(r.traces))
	for i, p := range r.traces {
		st[i] = stampOf(p)
	}
	return st
}

// dumpedTo is the flight recorder file that changed since before, or "".
func (r *rankWatch) dumpedTo(before []fileStamp) string {
	for i, st := range r.traceStamps() {
		if st.ok && (i >= len(before) || st != before[i]) {
			return r.traces[i]
		}
	}
	return ""
}

// dumpFlightRecorders asks PyTorch in every running worker here to dump
// its NCCL flight recorder, by writing to the pipe it made, and returns
// those asked. A worker without the pipe (no PyTorch, or no NCCL process
// group yet) is not asked.
func (h *hangWatch) dumpFlightRecorders() []*rankWatch {
	if h.dumped.Swap(true) {
		return nil
	}
	var asked []*rankWatch
	for _, r := range h.ranks {
		if !r.ended.Load() && r.pipe != "" && pokePipe(r.pipe) {
			asked = append(asked, r)
		}
	}
	return asked
}

// pokePipe writes a byte to the FIFO at path, if it is one that a reader
// holds open: it opens nothing else, never follows a link and never waits.
func pokePipe(path string) bool {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return false // ENXIO: nobody reads it
	}
	defer unix.Close(fd)
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false
	}
	n, err := unix.Write(fd, []byte("1"))
	return err == nil && n == 1
}

// waitDumps waits, at most dumpWait, until each asked worker's flight
// recorder file changed and then stayed the same for a tick of 50 ms.
func (h *hangWatch) waitDumps(g *supervise.Group, asked []*rankWatch, before map[*rankWatch][]fileStamp) {
	if len(asked) == 0 {
		return
	}
	deadline := time.NewTimer(dumpWait)
	defer deadline.Stop()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	last := map[*rankWatch][]fileStamp{}
	for {
		select {
		case <-g.Done():
			return
		case <-deadline.C:
			return
		case <-t.C:
		}
		done := true
		for _, r := range asked {
			st := r.traceStamps()
			if !r.ended.Load() && (r.dumpedTo(before[r]) == "" || !slices.Equal(st, last[r])) {
				done = false
			}
			last[r] = st
		}
		if done {
			return
		}
	}
}
