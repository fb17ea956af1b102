package rendezvous

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A job's lifecycle. While no outcome is decided the job's state follows
// its current round's (roundState.jobState, rounds.go); its outcome, once
// decided, fixes how it ends, and the first cause wins:
//
//	        submitted (or taken over from its agents)
//	              │
//	              ▼
//	 ┌──────── pending ◄────────────── a restart's next round waits
//	 │            │ ports reserved            ▲
//	 │            ▼                           │
//	 │         running ──a stop is sent──► stopping
//	 │            │ every worker                │ every worker accounted for,
//	 │            │ exited well                 │ an outcome decided
//	 ▼            ▼                             ▼
//	failed      succeeded                failed, cancelled
//	cancelled
//
// jobTransitions is the one place that allows a step; the outcome says
// which of the ended states a job takes.
var jobTransitions = map[musterv1.JobState][]musterv1.JobState{
	musterv1.JobState_JOB_STATE_UNSPECIFIED: {musterv1.JobState_JOB_STATE_PENDING, musterv1.JobState_JOB_STATE_RUNNING},
	musterv1.JobState_JOB_STATE_PENDING: {musterv1.JobState_JOB_STATE_RUNNING,
		musterv1.JobState_JOB_STATE_FAILED, musterv1.JobState_JOB_STATE_CANCELLED},
	musterv1.JobState_JOB_STATE_RUNNING: {musterv1.JobState_JOB_STATE_STOPPING, musterv1.JobState_JOB_STATE_SUCCEEDED,
		musterv1.JobState_JOB_STATE_FAILED, musterv1.JobState_JOB_STATE_CANCELLED},
	musterv1.JobState_JOB_STATE_STOPPING: {musterv1.JobState_JOB_STATE_PENDING,
		musterv1.JobState_JOB_STATE_FAILED, musterv1.JobState_JOB_STATE_CANCELLED},
}

// outcomeKind is why a job ends, once decided.
type outcomeKind int

const (
	undecided    outcomeKind = iota
	workerFailed             // a worker failed: the job's code is its exit code
	nodeLost                 // a node of the running round was lost
	cancelled                // cancel, --timeout, the launcher gone: the code given
	notRun                   // the store could not run a round: no nodes, no ports
)

// outcome is how a job ends: its kind, the worker (or node) that failed it,
// its exit code and a one-line summary.
type outcome struct {
	kind    outcomeKind
	failure *musterv1.WorkerExited // workerFailed and nodeLost
	loss    *musterv1.NodeLoss     // nodeLost
	code    int32                  // cancelled and notRun
	reason  string
}

// state is the job state the outcome ends the job in.
func (o outcome) state() musterv1.JobState {
	switch o.kind {
	case workerFailed, nodeLost, notRun:
		return musterv1.JobState_JOB_STATE_FAILED
	case cancelled:
		return musterv1.JobState_JOB_STATE_CANCELLED
	}
	return musterv1.JobState_JOB_STATE_SUCCEEDED
}

// exitCode is the code the job ends with.
func (o outcome) exitCode() int32 {
	if o.failure != nil {
		return failure.ExitCode(o.failure)
	}
	return o.code
}

// decided says whether the job's outcome is fixed.
func (j *job) decided() bool { return j.outcome.kind != undecided }

// decideLocked fixes j's outcome unless one is already: the first cause of
// a job's end wins. It reports whether o was taken.
func (s *Store) decideLocked(j *job, o outcome) bool {
	if j.decided() || j.finished() {
		return false
	}
	j.outcome = o
	s.log.Debug("job outcome", zap.String("job", j.id), zap.Stringer("state", o.state()),
		zap.Int32("exit-code", o.exitCode()), zap.String("reason", o.reason))
	return true
}

// setJobStateLocked moves j to st, as jobTransitions allows, and tells its
// followers; the one place a job's state changes. An ended state's event is
// the JobFinished its caller appends.
func (s *Store) setJobStateLocked(j *job, st musterv1.JobState) error {
	if j.state == st {
		return nil
	}
	if !slices.Contains(jobTransitions[j.state], st) {
		return s.refusedLocked(fmt.Errorf("job %s: state %s to %s refused", j.id, j.state, st))
	}
	j.state = st
	s.jobsChangedLocked()
	if !j.finished() {
		s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_State{State: st}})
	}
	return nil
}

// refusedLocked reports a state change the tables do not draw: a bug. It is
// logged, and StoreConfig.Refused (which tests set) hears of it.
func (s *Store) refusedLocked(err error) error {
	s.log.Error("state change refused", zap.Error(err))
	if s.cfg.Refused != nil {
		s.cfg.Refused(err)
	}
	return err
}
