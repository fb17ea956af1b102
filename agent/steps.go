package agent

// step is one part of a job's life on this node, drawn once with its undo,
// as nomad draws a task's lifecycle with one hook per step.
type step struct {
	name string
	// do makes the step's part; nil: it was made before the start (the
	// round's ports), and the step only takes it back.
	do func() error
	// undo takes back what do made, at the job's end or after a later
	// step failed; it may run after a do that failed half-way, and running
	// it again harms nothing. nil: nothing to take back.
	undo func()
}

// stepHooks, when set, are called ahead of each step's do and each undo:
// tests watch or hold a job's steps there.
type stepHooks struct {
	do, undo func(name string)
}

// runSteps runs steps in order until one fails, then undoes, last first,
// the ones done and the one that failed, and returns its error. Once all
// are done, undoSteps takes them back at the job's end.
func runSteps(steps []step, hooks stepHooks) error {
	for i, st := range steps {
		if hooks.do != nil {
			hooks.do(st.name)
		}
		if st.do == nil {
			continue
		}
		if err := st.do(); err != nil {
			undoSteps(steps[:i+1], hooks)
			return err
		}
	}
	return nil
}

// undoSteps undoes steps, last first.
func undoSteps(steps []step, hooks stepHooks) {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].undo == nil {
			continue
		}
		if hooks.undo != nil {
			hooks.undo(steps[i].name)
		}
		steps[i].undo()
	}
}
