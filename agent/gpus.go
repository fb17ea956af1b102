package agent

// FreeGPUs is how many of this node's GPUs no job here holds.
func (a *Agent) FreeGPUs() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	busy := map[int32]bool{}
	for _, r := range a.jobs {
		for _, g := range r.asg.GetGpus() {
			busy[g] = true
		}
	}
	free := 0
	for _, g := range a.cfg.GPUs {
		if !busy[int32(g.Index)] {
			free++
		}
	}
	return free
}

// GPUsChanged receives a value when a job here starts or ends, which
// changes FreeGPUs.
func (a *Agent) GPUsChanged() <-chan struct{} { return a.gpusChanged }

func (a *Agent) signalGPUs() {
	select {
	case a.gpusChanged <- struct{}{}:
	default:
	}
}
