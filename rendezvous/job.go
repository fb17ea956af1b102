package rendezvous

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// job is one submitted job and the round it runs in.
type job struct {
	id       string
	spec     *musterv1.JobSpec
	state    musterv1.JobState
	events   *eventLog
	round    *round
	exited   map[int32]bool
	failure  *musterv1.WorkerExited
	code     int32  // exit code asked for by a cancel, when no worker failed first
	reason   string // why the job was stopped, if it was
	timer    *time.Timer
	attached int
	stdin    *stdinRelay        // nil when no rank reads the launcher's stdin
	owner    *musterv1.Identity // who submitted it; nil for the cluster operator
	token    string             // the job's credential for its workers
	// stopGrace is the grace of the stop sent to the job's nodes, -1 before
	// one is: a job is stopped once, again only to shorten the grace.
	stopGrace int64
}

func (j *job) finished() bool {
	switch j.state {
	case musterv1.JobState_JOB_STATE_SUCCEEDED, musterv1.JobState_JOB_STATE_FAILED, musterv1.JobState_JOB_STATE_CANCELLED:
		return true
	}
	return false
}

// Submit validates spec, forms the job's round and asks node rank 0 to
// reserve the job's ports; the job starts when they arrive. owner is the
// local user the job runs as, nil for the cluster operator.
func (s *Store) Submit(spec *musterv1.JobSpec, owner *musterv1.Identity) (string, error) {
	if err := ValidateSpec(spec); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", fmt.Errorf("store is closing")
	}
	j := &job{
		id:     newID("j-"),
		spec:   spec,
		state:  musterv1.JobState_JOB_STATE_PENDING,
		events: newEventLog(s.cfg.EventCount, s.cfg.EventBytes),
		exited: map[int32]bool{},
		owner:  owner,

		stopGrace: -1,
	}
	j.token = newJobToken(j.id)
	r, err := s.formRoundLocked(j)
	if err != nil {
		return "", err
	}
	j.round = r
	if sessions := stdinSessionsLocked(spec, r); len(sessions) > 0 {
		j.stdin = newStdinRelay(sessions)
	}
	s.jobs[j.id] = j
	s.order = append(s.order, j.id)
	s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_State{State: j.state}})
	j.events.expectFollower(firstFollowerWait)
	s.log.Info("job submitted", zap.String("job", j.id), zap.ByteStrings("argv", spec.Argv),
		zap.Int32("nnodes", spec.Nnodes), zap.Int32("gpus", spec.Gpus), zap.Int32("nproc", spec.Nproc),
		zap.Uint32("uid", owner.GetUid()), zap.Bool("operator", owner == nil))
	// Two ports on node rank 0: MASTER_PORT and the NCCL bootstrap root.
	s.sendLocked(r.nodes[0], &musterv1.AgentCommand{Command: &musterv1.AgentCommand_ReservePorts{
		ReservePorts: &musterv1.ReservePorts{RoundId: r.id, Count: 2}}})
	return j.id, nil
}

// Publish records events an agent sent for a job; the first failed worker
// stops the job on every node.
func (s *Store) Publish(ctx context.Context, session string, evs []*musterv1.JobEvent) error {
	// Output waits for room while the job's followers read slowly; the wait
	// is per job, outside the store's lock.
	waited := map[string]bool{}
	for _, ev := range evs {
		if waited[ev.GetJobId()] || ev.GetOutput() == nil {
			continue
		}
		waited[ev.GetJobId()] = true
		s.mu.Lock()
		j := s.jobs[ev.GetJobId()]
		s.mu.Unlock()
		if j == nil {
			continue
		}
		n := 0
		for _, e := range evs {
			if e.GetJobId() == ev.GetJobId() {
				n += eventSize(e)
			}
		}
		if err := j.events.waitRoom(ctx, n); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[session]
	if n == nil {
		return fmt.Errorf("session %q: %w", session, ErrNotFound)
	}
	for _, ev := range evs {
		j := s.jobs[ev.GetJobId()]
		if j == nil || !n.jobs[j.id] {
			return fmt.Errorf("job %q: %w on node %s", ev.GetJobId(), ErrNotFound, n.info.GetName())
		}
		if j.finished() {
			continue
		}
		if err := s.checkEventLocked(j, n, ev); err != nil {
			return err
		}
		s.appendLocked(j, ev)
		if ex := ev.GetExited(); ex != nil {
			s.workerExitedLocked(j, ex)
		}
	}
	return nil
}

// checkEventLocked accepts only what an agent may say: about its own ranks.
func (s *Store) checkEventLocked(j *job, n *node, ev *musterv1.JobEvent) error {
	var rank int32
	switch e := ev.GetEvent().(type) {
	case *musterv1.JobEvent_Started:
		rank = e.Started.GetRank()
	case *musterv1.JobEvent_Output:
		rank = e.Output.GetRank()
		if len(e.Output.GetData()) > maxOutputBytes {
			return fmt.Errorf("job %s: output event of %d bytes, more than %d", j.id, len(e.Output.GetData()), maxOutputBytes)
		}
	case *musterv1.JobEvent_Exited:
		rank = e.Exited.GetRank()
		if len(e.Exited.GetStderrTail()) > 100 || totalLen(e.Exited.GetStderrTail()) > 64<<10 {
			return fmt.Errorf("job %s: stderr tail too long", j.id)
		}
	default:
		return fmt.Errorf("job %s: agents may publish worker events only", j.id)
	}
	nodeRank, ok := j.round.rank[n]
	if !ok {
		nodeRank = -1
	}
	if rank/j.round.nproc != nodeRank || rank < 0 {
		return fmt.Errorf("job %s: node %s published for rank %d, not one of its own", j.id, n.info.GetName(), rank)
	}
	return nil
}

func (s *Store) workerExitedLocked(j *job, ex *musterv1.WorkerExited) {
	j.exited[ex.GetRank()] = true
	if failed(ex) && j.failure == nil && j.code == 0 {
		j.failure = ex
		j.reason = describeExit(ex)
		s.stopLocked(j, j.spec.KillTimeoutMs)
	}
	if int32(len(j.exited)) == j.round.worldSize {
		s.finishLocked(j)
	}
}

func failed(ex *musterv1.WorkerExited) bool {
	return !ex.GetStopped() && (ex.GetExitCode() != 0 || ex.GetSignal() != 0 || ex.GetError() != "")
}

// ExitCode is the shell's code for a worker's end: its exit status, or
// 128+signal.
func ExitCode(ex *musterv1.WorkerExited) int32 {
	if ex.GetSignal() != 0 {
		return 128 + ex.GetSignal()
	}
	if ex.GetExitCode() == 0 && ex.GetError() != "" {
		return 1
	}
	return ex.GetExitCode()
}

func describeExit(ex *musterv1.WorkerExited) string {
	who := fmt.Sprintf("rank %d (node %s, local rank %d)", ex.GetRank(), ex.GetNode(), ex.GetLocalRank())
	switch {
	case ex.GetError() != "":
		return who + ": " + ex.GetError()
	case ex.GetSignal() != 0:
		return fmt.Sprintf("%s was killed by signal %d (%s)", who, ex.GetSignal(), unix.SignalName(unix.Signal(ex.GetSignal())))
	}
	return fmt.Sprintf("%s exited with code %d", who, ex.GetExitCode())
}

// stopLocked asks every node of the job to stop its workers, once: later
// calls send again only a shorter grace, so that nodes lost one by one, or
// cancels repeated, cost nothing more.
func (s *Store) stopLocked(j *job, killTimeoutMs int64) {
	if j.finished() {
		return
	}
	if j.state == musterv1.JobState_JOB_STATE_PENDING {
		s.finishLocked(j)
		return
	}
	if j.state != musterv1.JobState_JOB_STATE_STOPPING {
		j.state = musterv1.JobState_JOB_STATE_STOPPING
		s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_State{State: j.state}})
	}
	if j.stopGrace >= 0 && killTimeoutMs >= j.stopGrace {
		return
	}
	j.stopGrace = killTimeoutMs
	for _, n := range j.round.nodes {
		if _, live := s.nodes[n.session]; live {
			s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Stop{Stop: &musterv1.StopJob{
				JobId: j.id, Reason: j.reason, KillTimeoutMs: killTimeoutMs}}})
		}
	}
}

// Cancel stops a job; code is its exit code unless a worker failed first.
// force kills the workers at once.
func (s *Store) Cancel(jobID string, force bool, reason string, code int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil {
		return fmt.Errorf("job %q: %w", jobID, ErrNotFound)
	}
	if j.finished() {
		return nil
	}
	if j.failure == nil && j.code == 0 {
		j.code = max(code, 1)
		j.reason = reason
	}
	grace := j.spec.KillTimeoutMs
	if force {
		grace = 0
	}
	s.log.Info("job cancelled", zap.String("job", jobID), zap.String("reason", reason), zap.Bool("force", force))
	s.stopLocked(j, grace)
	return nil
}

// nodeLostLocked counts a lost node's workers as ended and fails the job.
func (s *Store) nodeLostLocked(j *job, n *node, reason string) {
	if j.finished() {
		return
	}
	if rank, ok := j.round.rank[n]; ok {
		for l := int32(0); l < j.round.nproc; l++ {
			j.exited[int32(rank)*j.round.nproc+l] = true
		}
		if j.failure == nil && j.code == 0 {
			j.failure = &musterv1.WorkerExited{Rank: int32(rank) * j.round.nproc, Node: n.info.GetName(),
				Error: "node lost: " + reason}
			j.reason = describeExit(j.failure)
		}
	}
	s.stopLocked(j, j.spec.KillTimeoutMs)
	if !j.finished() && int32(len(j.exited)) == j.round.worldSize {
		s.finishLocked(j)
	}
}

// finishLocked records the job's end, releases its GPUs and keys, and
// closes its event log.
func (s *Store) finishLocked(j *job) {
	fin := &musterv1.JobFinished{Failure: j.failure, Summary: j.reason}
	switch {
	case j.failure != nil:
		fin.State, fin.ExitCode = musterv1.JobState_JOB_STATE_FAILED, ExitCode(j.failure)
	case j.code != 0:
		fin.State, fin.ExitCode = musterv1.JobState_JOB_STATE_CANCELLED, j.code
	default:
		fin.State = musterv1.JobState_JOB_STATE_SUCCEEDED
	}
	j.state = fin.State
	s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_Finished{Finished: fin}})
	j.events.close()
	if j.attached == 0 {
		// An ended job nobody follows keeps only its last events, for late readers.
		j.events.trim(finishedEvents)
	}
	if j.timer != nil {
		j.timer.Stop()
	}
	if j.stdin != nil {
		j.stdin.close()
	}
	for _, n := range j.round.nodes {
		for g, owner := range n.busy {
			if owner == j.id {
				delete(n.busy, g)
			}
		}
		delete(n.jobs, j.id)
	}
	s.kv.DeleteScope(j.id)
	s.pruneLocked()
	s.log.Info("job finished", zap.String("job", j.id), zap.Stringer("state", fin.State),
		zap.Int32("exit-code", fin.ExitCode), zap.String("summary", fin.Summary))
}

func (s *Store) appendLocked(j *job, ev *musterv1.JobEvent) { j.events.append(j.id, ev) }
