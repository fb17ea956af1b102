package agent

// SetStepHook sets a function called ahead of each step of a job's start.
func SetStepHook(a *Agent, hook func(job, step string)) {
	a.mu.Lock()
	a.stepHook = hook
	a.mu.Unlock()
}
