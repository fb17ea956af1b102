package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Supervisor runs one job's workers on this node: it starts them, reports
// their output and exits, and stops them all on the first failure
// (SIGTERM, the kill timeout, then SIGKILL).
type Supervisor struct {
	log     *zap.Logger
	job     string
	node    string
	publish func(*musterv1.JobEvent)
	killAt  time.Duration // the job's kill timeout

	mu       sync.Mutex
	procs    map[int]*process // by local rank, while running
	stopping bool
	done     chan struct{}
}

// workerPlan is one worker of the job on this node.
type workerPlan struct {
	rank, localRank int
	spec            workerSpec
}

func newSupervisor(log *zap.Logger, job, node string, killTimeout time.Duration, publish func(*musterv1.JobEvent)) *Supervisor {
	return &Supervisor{log: log, job: job, node: node, killAt: killTimeout, publish: publish,
		procs: map[int]*process{}, done: make(chan struct{})}
}

// Run starts the workers and returns once all have ended and been reported.
// logDir, when set, gets one file per rank.
func (s *Supervisor) Run(plans []workerPlan, logDir string) {
	defer close(s.done)
	var wg sync.WaitGroup
	for _, pl := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.runWorker(pl, logDir)
		}()
	}
	wg.Wait()
}

func (s *Supervisor) runWorker(pl workerPlan, logDir string) {
	st, stopped, stderrTail := s.runProcess(pl, logDir)
	s.exited(pl, st, stopped, stderrTail)
}

// runProcess runs one worker to its end. Its log file is complete before it
// returns, so that whoever learns of the exit can read the whole file.
func (s *Supervisor) runProcess(pl workerPlan, logDir string) (st exitStatus, stopped bool, stderrTail []string) {
	errTail := &tail{}
	ws := pl.spec
	ws.stdout = s.outputSink(pl.rank, musterv1.Stream_STREAM_STDOUT, nil)
	ws.stderr = s.outputSink(pl.rank, musterv1.Stream_STREAM_STDERR, errTail)
	if logDir != "" {
		lf, err := openLogFile(filepath.Join(logDir, fmt.Sprintf("rank-%d.log", pl.rank)), ws.cred)
		if err != nil {
			return startError(ws.argv[0], fmt.Errorf("--log-dir: %w", err)), false, nil
		}
		defer lf.Close()
		ws.stdout = tee(ws.stdout, lf.add)
		ws.stderr = tee(ws.stderr, lf.add)
	}

	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return exitStatus{signal: int(syscall.SIGTERM)}, true, nil
	}
	p, err := startProcess(ws)
	if err != nil {
		s.mu.Unlock()
		return startError(ws.argv[0], err), false, nil
	}
	s.procs[pl.localRank] = p
	s.mu.Unlock()
	s.publish(&musterv1.JobEvent{JobId: s.job, Event: &musterv1.JobEvent_Started{Started: &musterv1.WorkerStarted{
		Rank: int32(pl.rank), LocalRank: int32(pl.localRank), Node: s.node, Pid: int32(p.pid)}}})

	st = p.wait(unkillableAfter)
	s.mu.Lock()
	delete(s.procs, pl.localRank)
	stopped = s.stopping
	s.mu.Unlock()
	return st, stopped, errTail.get()
}

// exited reports a worker's end; a failure stops the rest of the job here at
// once, before the store tells every node.
func (s *Supervisor) exited(pl workerPlan, st exitStatus, stopped bool, stderrTail []string) {
	ev := &musterv1.WorkerExited{Rank: int32(pl.rank), LocalRank: int32(pl.localRank), Node: s.node,
		ExitCode: int32(st.code), Signal: int32(st.signal), StderrTail: stderrTail, Stopped: stopped, Error: st.err}
	s.log.Info("worker exited", zap.String("job", s.job), zap.Int("rank", pl.rank), zap.Int("exit-code", st.code),
		zap.Int("signal", st.signal), zap.Bool("stopped", stopped), zap.String("error", st.err))
	s.publish(&musterv1.JobEvent{JobId: s.job, Event: &musterv1.JobEvent_Exited{Exited: ev}})
	if !stopped && (st.code != 0 || st.signal != 0 || st.err != "") {
		s.Stop(s.killAt)
	}
}

func (s *Supervisor) outputSink(rank int, stream musterv1.Stream, t *tail) lineSink {
	return func(line []byte, partial bool) {
		if t != nil {
			t.add(line, partial)
		}
		s.publish(&musterv1.JobEvent{JobId: s.job, Event: &musterv1.JobEvent_Output{Output: &musterv1.Output{
			Rank: int32(rank), Stream: stream, Line: append([]byte(nil), line...), Partial: partial}}})
	}
}

func tee(a, b lineSink) lineSink {
	return func(line []byte, partial bool) { a(line, partial); b(line, partial) }
}

// Stop ends every worker: SIGTERM to each process group, then SIGKILL after
// grace. Calling it again with a shorter grace kills sooner.
func (s *Supervisor) Stop(grace time.Duration) {
	s.mu.Lock()
	first := !s.stopping
	s.stopping = true
	procs := make([]*process, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	if grace <= 0 {
		for _, p := range procs {
			p.signal(syscall.SIGKILL)
		}
		return
	}
	if !first {
		return
	}
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
	}
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
			s.Stop(0)
		}
	}()
}

// prepareLogDir makes --log-dir ready; the job's files go straight into it.
func prepareLogDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--log-dir %s: %w", dir, err)
	}
	return nil
}
