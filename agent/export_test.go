package agent

// SetStepHook sets a function called ahead of each step of a job's start.
func SetStepHook(a *Agent, hook func(job, step string)) {
	a.mu.Lock()
	a.stepHook = hook
	a.mu.Unlock()
}

// SetUndoHook sets a function called ahead of each undo of a job's steps,
// at its end or after its start failed.
func SetUndoHook(a *Agent, hook func(job, step string)) {
	a.mu.Lock()
	a.undoHook = hook
	a.mu.Unlock()
}

// UnackedExits counts the workers of a's jobs that exited and whose exit
// the store has not acknowledged: exits that wait for a store.
func UnackedExits(a *Agent) int {
	n := 0
	for _, j := range a.report() {
		for _, r := range j.GetRanks() {
			if r.GetExited() != nil && !r.GetAcked() {
				n++
			}
		}
	}
	return n
}
