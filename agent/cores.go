package agent

import (
	"sync"

	"github.com/musterhq/muster/topology"
)

// heldCores is the CPUs each running round's workers on this node are bound
// to with --cpu-bind cores, so that a job started beside them binds to other
// cores where there are free ones, and says that it shares where not.
type heldCores struct {
	mu     sync.Mutex
	rounds map[string]topology.CPUSet
}

// bind computes a round's bindings from the CPUs other rounds hold and
// records the ones it takes, under one lock: two jobs starting together
// see each other's.
func (h *heldCores) bind(round string, compute func(busy topology.CPUSet) []workerBinding) []workerBinding {
	h.mu.Lock()
	defer h.mu.Unlock()
	var busy topology.CPUSet
	for _, cpus := range h.rounds {
		busy = busy.Union(cpus)
	}
	out := compute(busy)
	var mine topology.CPUSet
	for _, b := range out {
		if b.report.GetMode() == string(topology.BindCores) {
			mine = mine.Union(b.cpus)
		}
	}
	if len(mine) > 0 {
		if h.rounds == nil {
			h.rounds = map[string]topology.CPUSet{}
		}
		h.rounds[round] = mine
	}
	return out
}

// release lets a round's cores go.
func (h *heldCores) release(round string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.rounds, round)
}
