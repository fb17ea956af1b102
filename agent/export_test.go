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
