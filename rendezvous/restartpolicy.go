package rendezvous

import (
	"fmt"
	"slices"
	"strings"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A job's restart policy: which failures start a new round while restarts
// are left (--restart-on, --no-restart-exit-codes), how long the next round
// waits (the back-off), and the causes of its rounds, which its end names.
//
// The back-off starts at restart_backoff_ms and doubles with each counted
// restart, up to restart_backoff_max_ms; a round that ran for
// backoffResetAfter before it failed starts the doubling again, so that a
// job that fails once a day waits the least each time while a crash loop
// waits the most. It counts from the moment the stopped round is over.

// backoffResetAfter is how long a round must have run for the back-off
// after its failure to start again from restart_backoff_ms.
const backoffResetAfter = 5 * time.Minute

// maxRoundCauses bounds the causes a job's end names: its last ones.
const maxRoundCauses = 64

// restartForWorkerLocked says whether ex's failure starts a new round of j;
// when it does not although restarts are left, why says which rule kept it
// from doing so.
func restartForWorkerLocked(j *job, ex *musterv1.WorkerExited) (restart bool, why string) {
	if !restartsLeft(j) {
		return false, ""
	}
	spec := j.spec
	if ex.GetSignal() == 0 && ex.GetError() == "" && slices.Contains(spec.GetNoRestartExitCodes(), ex.GetExitCode()) {
		return false, fmt.Sprintf("exit code %d is one of --no-restart-exit-codes: not restarted", ex.GetExitCode())
	}
	if spec.GetRestartOn() == musterv1.RestartOn_RESTART_ON_NODE_LOSS {
		return false, "--restart-on node-loss: a failed worker is not restarted"
	}
	return true, ""
}

// restartBackoffLocked is how long j's next round waits after a counted
// restart of its current round; it counts the restart for the doubling.
func (s *Store) restartBackoffLocked(j *job) time.Duration {
	first := time.Duration(j.spec.GetRestartBackoffMs()) * time.Millisecond
	if first <= 0 {
		return 0
	}
	if r := j.round; !r.runningSince.IsZero() && s.now().Sub(r.runningSince) >= backoffResetAfter {
		j.backoffs = 0
	}
	most := max(time.Duration(j.spec.GetRestartBackoffMaxMs())*time.Millisecond, first)
	d := first
	for i := int32(0); i < j.backoffs && d < most; i++ {
		d *= 2
	}
	j.backoffs++
	return min(d, most)
}

// noteRoundCauseLocked keeps why j's current round stops, for its end.
func noteRoundCauseLocked(j *job, reason string) {
	j.causes = append(j.causes, fmt.Sprintf("round %d: %s", j.round.number, reason))
	if len(j.causes) > maxRoundCauses {
		j.causesDropped += int32(len(j.causes) - maxRoundCauses)
		j.causes = slices.Delete(j.causes, 0, len(j.causes)-maxRoundCauses)
	}
}

// roundCausesLocked puts the causes of j's earlier rounds in its end, and
// whether its last round started its workers.
func roundCausesLocked(j *job, fin *musterv1.JobFinished) {
	fin.RoundCauses, fin.RoundCausesDropped = slices.Clone(j.causes), j.causesDropped
	fin.LastRoundNotStarted = j.round.state < roundRunning
}

// backingOffLocked says whether j's waiting round must wait out its
// restart's back-off; it forms once the back-off passed.
func (s *Store) backingOffLocked(j *job) bool {
	return s.holdRoundLocked(j, j.notBefore, &j.round.backoffTimer, TimerBackoff, "out its restart's back-off")
}

// withoutRestartWhy adds to a failure's description the rule that kept it
// from a restart, if one did.
func withoutRestartWhy(reason, why string) string {
	if why == "" || strings.Contains(reason, why) {
		return reason
	}
	return reason + " (" + why + ")"
}
