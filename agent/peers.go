package agent

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
)

// PeerLost stops this node's workers of every job that has the named node
// among its nodes, for reason: the job cannot go on without it, and its
// store may be unreachable too (gossip told this agent, not the store).
func (a *Agent) PeerLost(name, reason string) {
	if name == a.cfg.Name {
		return
	}
	a.mu.Lock()
	var hit []*jobRun
	for _, r := range a.jobs {
		if slices.Contains(r.asg.GetNodeNames(), name) {
			hit = append(hit, r)
		}
	}
	a.mu.Unlock()
	msg := fmt.Sprintf("node %s lost: %s", name, reason)
	for _, r := range hit {
		a.log.Warn("peer lost; stopping job", zap.String("job", r.asg.GetJobId()), zap.String("node", name), zap.String("reason", reason))
		r.sup.PeerLost(time.Duration(r.asg.GetSpec().GetKillTimeoutMs())*time.Millisecond, name, msg)
	}
}

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
