package rendezvous

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Elastic jobs (min_nodes set) and restarts. A round of an elastic job
// forms with nnodes nodes, or with at least min_nodes once its last call
// has passed since that many were ready; a node that comes later waits for
// the next round. While a round runs with fewer than nnodes nodes, a node
// that comes starts a new round with it, not counted as a restart (as
// torchrun does). A failed worker or a lost node starts a new round while
// the job has restarts left, counted job-wide: an agent that quickly comes
// back does not get a fresh count.

// leastNodes is the fewest nodes a round of spec may form with.
func leastNodes(spec *musterv1.JobSpec) int { return jobspec.LeastNodes(spec) }

// lastCallLocked forms j's waiting round with the ready nodes once the last
// call has passed since enough for leastNodes were ready; it reports whether
// the round formed now.
func (s *Store) lastCallLocked(j *job) bool {
	r := j.round
	d := time.Duration(j.spec.LastCallMs) * time.Millisecond
	if d <= 0 {
		picked, _ := s.pickLocked(s.placementOf(j))
		s.formLocked(j, picked)
		return true
	}
	if r.lastCall == nil {
		r.lastCall = s.afterLocked(d, j, r, TimerLastCall)
	}
	return false
}

// lastCallPassedLocked forms j's waiting round with the nodes there are,
// when they are enough for its least.
func (s *Store) lastCallPassedLocked(j *job) {
	r := j.round
	if r.state != roundWaiting {
		return
	}
	r.lastCall = nil
	if picked, _ := s.pickLocked(s.placementOf(j)); len(picked) >= leastNodes(j.spec) {
		s.log.Info("round's last call", zap.String("job", j.id), zap.Int("nodes", len(picked)))
		s.formLocked(j, picked)
	}
}

// restartsLeft says whether a failure of j starts a new round.
func restartsLeft(j *job) bool { return j.restarts < j.spec.MaxRestarts }

// restartLocked stops j's round and lets its next one begin once every
// worker is accounted for. counted restarts use up the job's restarts.
func (s *Store) restartLocked(j *job, reason string, counted bool) {
	r := j.round
	var backoff time.Duration
	if counted {
		j.restarts++
		backoff = s.restartBackoffLocked(j)
	}
	s.cfg.Recorder.RoundRestarted()
	j.pendingBackoff = backoff
	noteRoundCauseLocked(j, reason)
	s.log.Info("job round restarting", zap.String("job", j.id), zap.Int32("round", r.number), zap.String("reason", reason),
		zap.Int32("restarts", j.restarts), zap.Bool("counted", counted), zap.Duration("backoff", backoff))
	s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_Restarting{Restarting: &musterv1.RoundRestarting{
		Round: r.number, Reason: reason, RestartCount: j.restarts, MaxRestarts: j.spec.MaxRestarts, Counted: counted,
		BackoffMs: backoff.Milliseconds()}}})
	switch r.state {
	case roundReserving:
		s.endRoundLocked(j)
		s.startRoundLocked(j)
		s.retryWaitingLocked()
		return
	case roundRunning:
		s.setRoundStateLocked(j, roundStopping)
	}
	r.restart = true
	s.sendStopLocked(j, "restarting: "+reason, j.spec.KillTimeoutMs)
	if int32(len(r.exited)) == r.worldSize {
		s.roundOverLocked(j)
	}
}

// growLocked starts a new round, with n, of each elastic job that runs on
// fewer nodes than it may have and could take n.
func (s *Store) growLocked(n *node) {
	for _, id := range s.order {
		j := s.jobs[id]
		if j == nil || j.finished() || j.spec.MinNodes == 0 || n.jobs[id] {
			continue
		}
		r := j.round
		if r.state != roundRunning || r.restart || int32(len(r.nodes)) >= j.spec.Nnodes ||
			!s.placementOf(j).candidate(n) || !ready(n, j.spec) {
			continue
		}
		s.restartLocked(j, fmt.Sprintf("node %s joined: the job grows from %d nodes (at most %d)", n.info.GetName(),
			len(r.nodes), j.spec.Nnodes), false)
	}
}
