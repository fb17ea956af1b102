package agent

// step is one part of a job's start on this node, drawn once with its undo,
// as nomad draws a task's lifecycle with one hook per step.
type step struct {
	name string
	// do makes the step's part; nil: it was made before the start (the
	// round's ports), and the step only takes it back.
	do func() error
	// undo takes back what do made; it may run more than once, and after a
	// do that failed half-way. nil: nothing to take back.
	undo func()
}

// runSteps runs steps in order until one fails, then undoes, last first,
// the ones done and the one that failed, and returns its error. before,
// when set, is called ahead of each step.
func runSteps(steps []step, before func(name string)) error {
	for i, st := range steps {
		if before != nil {
			before(st.name)
		}
		if st.do == nil {
			continue
		}
		if err := st.do(); err != nil {
			undoSteps(steps[:i+1])
			return err
		}
	}
	return nil
}

// undoSteps undoes steps, last first.
func undoSteps(steps []step) {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].undo != nil {
			steps[i].undo()
		}
	}
}
