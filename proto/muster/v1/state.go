package musterv1

// Ended says whether a job in state s has ended: succeeded, failed or
// cancelled.
func (s JobState) Ended() bool {
	switch s {
	case JobState_JOB_STATE_SUCCEEDED, JobState_JOB_STATE_FAILED, JobState_JOB_STATE_CANCELLED:
		return true
	}
	return false
}
