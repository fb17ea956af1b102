package rendezvous

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/failure"
	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
)

// job is one submitted job and the round it runs in.
type job struct {
	id       string
	spec     *musterv1.JobSpec
	state    musterv1.JobState
	events   *eventLog
	round    *round  // the current round
	outcome  outcome // how it ends, once decided (lifecycle.go)
	timer    *jobTimer
	attached int
	stdin    *StdinRelay        // nil when no rank reads the launcher's stdin
	owner    *musterv1.Identity // who submitted it; nil for the cluster operator
	token    string             // the job's credential for its workers
	place    *placement         // see placementOf
	// fencedUntil is when the workers of nodes its rounds lost are certainly
	// gone; no round forms before (lease.go).
	fencedUntil time.Time
	fencedFor   string // what the fence waits for, for people
	restarts    int32  // rounds begun after a failure (elastic.go)
	// torchStoreNode serves the job's TCPStore: its last node rank 0 that was
	// asked to, until told to release it.
	torchStoreNode *node
	// When it was submitted, its workers first started and it ended (zero
	// for what the store did not see).
	submitted, started, ended time.Time
	// rebuilt says the store took the job over from its agents' reports;
	// lastExit is the latest exit they reported, by their clocks: a job
	// that ended while no store was there ended then, not on its return.
	rebuilt  bool
	lastExit time.Time
	// ranOn names the nodes of every round formed, which keep their
	// ranks' output (logs.go).
	ranOn []string
	// ranSet is ranOn as a set: a round of 10,000 nodes is checked against
	// it in linear time.
	ranSet map[string]bool
	// ran are its last rounds that started their workers (maxRoundsShown).
	ran []*musterv1.JobRound
	// The restart policy's (restartpolicy.go): the counted restarts the
	// back-off doubled for, the back-off the next round waits and the time
	// before which it forms, and why each earlier round stopped.
	backoffs       int32
	pendingBackoff time.Duration
	notBefore      time.Time
	causes         []string
	causesDropped  int32
	// signalled is when each signal was last sent to its workers (signal.go).
	signalled map[int32]time.Time
}

func (j *job) finished() bool { return j.state.Ended() }

// Submit validates spec and starts the job's first round, which waits for
// nodes up to the spec's wait timeout (without one, Submit fails when they
// are not there) and then asks node rank 0 to reserve the job's ports; the
// job starts when they arrive. owner is the local user the job runs as, nil
// for the cluster operator.
//
// A non-empty submission names the submission: the job's ID derives from it
// and its owner, and the same submission made again returns that job
// without a second one (its launcher lost the answer with a store's leader).
func (s *Store) Submit(spec *musterv1.JobSpec, owner *musterv1.Identity, submission string) (string, error) {
	if err := validateSpec(spec); err != nil {
		return "", err
	}
	if len(submission) > maxSubmissionBytes {
		return "", fmt.Errorf("submission name of %d bytes, more than %d", len(submission), maxSubmissionBytes)
	}
	id := newID("j-")
	if submission != "" {
		h := sha256.Sum256(fmt.Appendf(nil, "%t/%d/%s", owner == nil, owner.GetUid(), submission))
		id = "j-" + hex.EncodeToString(h[:6])
		if s.submitted(id, owner) {
			return id, nil
		}
	}
	res, err := s.Apply(&SubmitJob{JobID: id, Token: security.NewJobToken(id), Spec: spec, Owner: owner})
	if err != nil && submission != "" && s.submitted(id, owner) {
		// The first try was applied after all.
		return id, nil
	}
	return res.JobID, err
}

// maxSubmissionBytes bounds a submission's name.
const maxSubmissionBytes = 128

// submitted says whether the store holds job id, submitted by owner.
func (s *Store) submitted(id string, owner *musterv1.Identity) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	return j != nil && proto.Equal(j.owner, owner)
}

func (s *Store) submitLocked(c *SubmitJob) (string, error) {
	if s.closed {
		return "", fmt.Errorf("store is closing")
	}
	spec := c.Spec
	place := newPlacement(spec, s.schedule, nil)
	if spec.WaitTimeoutMs <= 0 && s.countReadyLocked(place) < leastNodes(spec) {
		picked, unusable := s.pickLocked(place)
		return "", formError(place, len(s.nodes), picked, unusable)
	}
	if s.jobs[c.JobID] != nil {
		return "", fmt.Errorf("job %s: submitted already", c.JobID)
	}
	j := &job{
		id:        c.JobID,
		spec:      spec,
		place:     place,
		events:    newEventLog(s.cfg.EventCount, s.cfg.EventBytes),
		owner:     c.Owner,
		token:     c.Token,
		submitted: c.At,
	}
	place.ranOn = &j.ranOn
	if spec.GetStdinAll() || spec.StdinRank != nil {
		// Its readers are known once the first round has its nodes.
		j.stdin = newStdinRelay(nil)
	}
	s.jobs[j.id] = j
	s.order = append(s.order, j.id)
	s.setJobStateLocked(j, musterv1.JobState_JOB_STATE_PENDING)
	j.events.expectFollower(firstFollowerWait)
	s.log.Info("job submitted", zap.String("job", j.id), zap.ByteStrings("argv", spec.Argv),
		zap.Int32("nnodes", spec.Nnodes), zap.Int32("gpus", spec.Gpus), zap.Int32("nproc", spec.Nproc),
		zap.Duration("wait-timeout", time.Duration(spec.WaitTimeoutMs)*time.Millisecond),
		zap.Uint32("uid", c.Owner.GetUid()), zap.Bool("operator", c.Owner == nil))
	s.startRoundLocked(j)
	return j.id, nil
}

// Publish records events an agent sent for a job; the first failed worker
// stops the job on every node. With firstSeq set, the events are the job's
// from that sequence number on, and those the store already applied are
// skipped: a batch sent again is harmless. A batch is applied whole or not
// at all. It returns the highest sequence number applied.
func (s *Store) Publish(ctx context.Context, session string, firstSeq uint64, evs []*musterv1.JobEvent) (uint64, error) {
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
			return 0, err
		}
	}
	res, err := s.Apply(&PublishEvents{Session: session, FirstSeq: firstSeq, Events: evs})
	return res.Acked, err
}

func (s *Store) publishLocked(c *PublishEvents) (uint64, error) {
	session, firstSeq, evs := c.Session, c.FirstSeq, c.Events
	n := s.nodes[session]
	if n == nil {
		return 0, fmt.Errorf("session %q: %w", session, ErrNoSession)
	}
	var acked uint64
	var seqJob string
	if firstSeq > 0 && len(evs) > 0 {
		id := evs[0].GetJobId()
		seqJob = id
		for _, ev := range evs {
			if ev.GetJobId() != id {
				return 0, fmt.Errorf("a numbered batch holds events of jobs %s and %s: %w", id, ev.GetJobId(), ErrBadEvents)
			}
		}
		last := firstSeq + uint64(len(evs)) - 1
		if done := n.seqs[id]; done >= firstSeq {
			evs = evs[min(done-firstSeq+1, uint64(len(evs))):]
		}
		acked = max(last, n.seqs[id])
	}
	// Everything is checked before anything is applied.
	for _, ev := range evs {
		j := s.jobs[ev.GetJobId()]
		if j == nil || !n.jobs[j.id] {
			return 0, fmt.Errorf("job %q: %w on node %s", ev.GetJobId(), ErrNotFound, n.info.GetName())
		}
		if j.finished() {
			continue
		}
		if err := s.checkEventLocked(j, n, ev); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrBadEvents, err)
		}
	}
	var seqRound *round
	if j := s.jobs[seqJob]; j != nil {
		seqRound = j.round
	}
	for _, ev := range evs {
		j := s.jobs[ev.GetJobId()]
		if j.finished() {
			continue
		}
		if hc := ev.GetHangClues(); hc != nil {
			s.hangCluesLocked(j, n, hc)
			continue
		}
		ex := ev.GetExited()
		if ex != nil && (j.round.exited[ex.GetRank()] || j.round.state < roundRunning) {
			// Already known (from the agent's report), or of a round before
			// this one, which has no workers yet.
			continue
		}
		if ex != nil {
			s.hungLocked(j, ex)
		}
		s.appendLocked(j, ev)
		if st := ev.GetStarted(); st != nil {
			j.round.workerStarted(st)
		}
		if ex != nil {
			j.lastExit = time.Time{} // an exit heard live: the job ends now
			s.workerExitedLocked(j, ex)
		}
	}
	// A batch whose last exit began the job's next round leaves that
	// round's numbering (from 1) to it.
	if j := s.jobs[seqJob]; seqJob != "" && j.round == seqRound {
		n.seqs[seqJob] = acked
	}
	return acked, nil
}

// checkEventLocked accepts only what an agent may say: about its own ranks.
func (s *Store) checkEventLocked(j *job, n *node, ev *musterv1.JobEvent) error {
	var rank int32
	switch e := ev.GetEvent().(type) {
	case *musterv1.JobEvent_Started:
		rank = e.Started.GetRank()
		if b := e.Started.GetBinding(); b != nil && proto.Size(b) > jobspec.MaxBindingBytes {
			return fmt.Errorf("job %s: binding of %d bytes, more than %d", j.id, proto.Size(b), jobspec.MaxBindingBytes)
		}
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
		if len(e.Exited.GetLogIncomplete()) > 4<<10 {
			return fmt.Errorf("job %s: log error of %d bytes", j.id, len(e.Exited.GetLogIncomplete()))
		}
		if err := checkHang(j, e.Exited.GetHang()); err != nil {
			return err
		}
		if err := checkPythonError(j, e.Exited.GetPythonError()); err != nil {
			return err
		}
	case *musterv1.JobEvent_Lost:
		return nil // output the agent had to drop while no store took it
	case *musterv1.JobEvent_HangClues:
		return checkHangClues(j, n, e.HangClues)
	default:
		return fmt.Errorf("job %s: agents may publish worker events only", j.id)
	}
	nodeRank, ok := j.round.rank[n]
	if !ok {
		nodeRank = -1
	}
	if nodeOf(rank, j.round.nproc) != nodeRank || rank < 0 {
		return fmt.Errorf("job %s: node %s published for rank %d, not one of its own", j.id, n.info.GetName(), rank)
	}
	return nil
}

// checkPythonError accepts a worker's Python exception as its agent may
// tell it: a few short lines.
func checkPythonError(j *job, e *musterv1.PythonError) error {
	if e == nil {
		return nil
	}
	if len(e.GetType()) > 256 || len(e.GetMessage()) > 4<<10 || len(e.GetFrames()) > 8 || totalLen(e.GetFrames()) > 8<<10 {
		return fmt.Errorf("job %s: a Python exception too large", j.id)
	}
	return nil
}

func (s *Store) workerExitedLocked(j *job, ex *musterv1.WorkerExited) {
	s.cfg.Recorder.WorkerExited(ex)
	r := j.round
	r.exited[ex.GetRank()] = true
	s.culpritExitedLocked(j, ex)
	if failure.Failed(ex) && r.hang != nil && !j.decided() && !r.restart {
		// Its verdict decides: a failure meanwhile is the hang's doing.
		if r.hang.held == nil {
			r.hang.held = ex
		}
		if int32(len(r.exited)) == r.worldSize && s.hangVerdictLocked(j) {
			return
		}
		s.roundOverIfDoneLocked(j, r)
		return
	}
	if s.failedLocked(j, ex) {
		return
	}
	s.roundOverIfDoneLocked(j, r)
}

// failedLocked ends the job, or restarts it (and says so), for a failed
// worker ex, unless the job's end is decided or its round stops for a
// restart already.
func (s *Store) failedLocked(j *job, ex *musterv1.WorkerExited) (restarted bool) {
	// A worker that fails while its round stops for a restart fails nothing.
	if !failure.Failed(ex) || j.decided() || j.round.restart {
		return false
	}
	restart, why := restartForWorkerLocked(j, ex)
	if restart {
		s.restartLocked(j, failure.Describe(j.spec, ex), true)
		return true
	}
	s.decideLocked(j, outcome{kind: workerFailed, failure: ex, reason: withoutRestartWhy(failure.Describe(j.spec, ex), why)})
	s.stopLocked(j, j.spec.KillTimeoutMs)
	return false
}

// roundOverIfDoneLocked ends round r once every one of its workers is
// accounted for, if it is still j's round.
func (s *Store) roundOverIfDoneLocked(j *job, r *round) {
	if !j.finished() && j.round == r && int32(len(r.exited)) == r.worldSize {
		s.roundOverLocked(j)
	}
}

// stopLocked stops the job: a round without workers yet ends with it, a
// running round's nodes are asked to stop their workers.
func (s *Store) stopLocked(j *job, killTimeoutMs int64) {
	if j.finished() {
		return
	}
	switch j.round.state {
	case roundWaiting, roundReserving:
		s.finishLocked(j)
		return
	case roundRunning:
		s.setRoundStateLocked(j, roundStopping)
	}
	s.sendStopLocked(j, j.outcome.reason, killTimeoutMs)
}

// sendStopLocked asks every live node of the job's round to stop its
// workers, once: later calls send again only a shorter grace, so that nodes
// lost one by one, or cancels repeated, cost nothing more.
func (s *Store) sendStopLocked(j *job, reason string, killTimeoutMs int64) {
	r := j.round
	if r.stopSent && killTimeoutMs >= r.stopGrace {
		return
	}
	r.stopSent, r.stopGrace = true, killTimeoutMs
	for _, n := range j.round.nodes {
		if _, live := s.nodes[n.session]; live {
			s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Stop{Stop: &musterv1.StopJob{
				JobId: j.id, Reason: reason, KillTimeoutMs: killTimeoutMs, DumpFirst: r.dumpFirst, AbortRanks: r.abortRanks}}})
		}
	}
}

// Cancel stops a job; code is its exit code unless a worker failed first.
// force kills the workers at once. A job that had ended already is left as
// it is: ended is its state then.
func (s *Store) Cancel(jobID string, force bool, reason string, code int32) (ended musterv1.JobState, err error) {
	res, err := s.Apply(&CancelJob{JobID: jobID, Force: force, Reason: reason, Code: code})
	return res.Ended, err
}

func (s *Store) cancelJobLocked(c *CancelJob) (musterv1.JobState, error) {
	j := s.jobs[c.JobID]
	if j == nil {
		return 0, fmt.Errorf("job %q: %w", c.JobID, ErrNotFound)
	}
	if j.finished() {
		return j.state, nil
	}
	s.cancelLocked(j, c.Force, c.Reason, c.Code)
	return 0, nil
}

func (s *Store) cancelLocked(j *job, force bool, reason string, code int32) {
	if j.finished() {
		return
	}
	s.decideLocked(j, outcome{kind: cancelled, code: max(code, 1), reason: reason})
	grace := j.spec.KillTimeoutMs
	if force {
		grace = 0
	}
	s.log.Info("job cancelled", zap.String("job", j.id), zap.String("reason", reason), zap.Bool("force", force))
	s.stopLocked(j, grace)
}

// nodeLostLocked counts a lost node's workers of j's round as ended, and
// restarts or fails the job for the loss.
func (s *Store) nodeLostLocked(j *job, n *node, loss *musterv1.NodeLoss) {
	r := j.round
	rank, ofRound := r.rank[n]
	if j.finished() || !ofRound {
		return
	}
	_, live := s.nodes[n.session]
	if live && !n.leaving && !r.restart && !j.decided() && restartsLeft(j) {
		// The node's agent may still be registered when one of its peers
		// heard of its loss first: the next round must not take it, and
		// its removal comes back here. A node that is leaving stays
		// registered, taking no round.
		s.removeNodeLocked(n, loss)
		return
	}
	announced := r.left[n]
	if live && n.leaving {
		// Its agent left and stops its workers: their exits, which it
		// delivers before it goes, end the round, with no fence to wait.
		// Should the agent go first, its removal comes back here.
		if r.left == nil {
			r.left = map[*node]bool{}
		}
		r.left[n] = true
	} else {
		loss = s.fenceLocked(j, n, loss)
		for l := int32(0); l < r.nproc; l++ {
			r.exited[globalRank(rank, r.nproc, l)] = true
		}
	}
	if !announced {
		s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_NodeLost{NodeLost: loss}})
	}
	switch {
	case r.restart:
		// A node lost while its round stops for a restart fails nothing:
		// the next round waits for nodes.
	case !j.decided() && restartsLeft(j):
		s.restartLocked(j, failure.DescribeLoss(loss), true)
		return
	default:
		s.decideLocked(j, outcome{kind: nodeLost, loss: loss, reason: failure.DescribeLoss(loss),
			failure: &musterv1.WorkerExited{Rank: globalRank(rank, r.nproc, 0), Node: n.info.GetName(),
				Error: "node lost: " + failure.Cause(loss), NodeLoss: loss}})
		s.stopLocked(j, j.spec.KillTimeoutMs)
	}
	s.roundOverIfDoneLocked(j, r)
}

// finishLocked records the job's end, releases its GPUs and keys, and
// closes its event log.
func (s *Store) finishLocked(j *job) {
	fin := &musterv1.JobFinished{Failure: j.outcome.failure, Summary: j.outcome.reason,
		State: j.outcome.state(), ExitCode: j.outcome.exitCode()}
	roundCausesLocked(j, fin)
	s.endRoundLocked(j)
	s.setJobStateLocked(j, fin.State)
	j.ended = s.now()
	if j.rebuilt && !j.lastExit.IsZero() && j.lastExit.Before(j.ended) {
		j.ended = j.lastExit
	}
	if s.cfg.Record != nil {
		// The history writes it to disk later, off the store's lock.
		s.cfg.Record(&musterv1.HistoryCommand{Command: &musterv1.HistoryCommand_Finished{Finished: proto.CloneOf(s.statusLocked(j))}})
	}
	s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_Finished{Finished: fin}})
	s.cfg.Recorder.JobFinished(j.outcome.result())
	j.events.close()
	if j.attached == 0 {
		// An ended job nobody follows keeps only its last events, for late readers.
		j.events.trim(finishedEvents)
	}
	s.stopTimerLocked(j.timer)
	j.timer = nil
	if j.stdin != nil {
		j.stdin.close()
	}
	s.kv.Drop(j.id)
	s.releaseTorchStoreLocked(j)
	s.pruneLocked()
	s.log.Info("job finished", zap.String("job", j.id), zap.Stringer("state", fin.State),
		zap.Int32("exit-code", fin.ExitCode), zap.String("summary", fin.Summary))
	// Its GPUs may let a waiting round form.
	s.retryWaitingLocked()
}

func (s *Store) appendLocked(j *job, ev *musterv1.JobEvent) { j.events.append(j.id, s.now(), ev) }

// jobsChangedLocked wakes the jobs' watchers (WatchJobs).
func (s *Store) jobsChangedLocked() {
	close(s.jobsChanged)
	s.jobsChanged = make(chan struct{})
}
