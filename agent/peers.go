package agent

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// reportLossTimeout bounds telling the store of a loss gossip found.
const reportLossTimeout = 5 * time.Second

// PeerLost stops this node's workers of every job whose assignment names the
// lost node: the job cannot go on without it, and its store may be
// unreachable too (gossip told this agent, not the store). An assignment of
// a large job names only node rank 0's peers (the roster is not sent to
// every node), so the loss also goes to the store, which knows every job's
// nodes and stops the jobs of this node that had the lost one.
func (a *Agent) PeerLost(loss *musterv1.NodeLoss) {
	name := loss.GetNode()
	if name == a.cfg.Name {
		return
	}
	loss.Observer = a.cfg.Name
	a.mu.Lock()
	var hit []*jobRun
	unnamed := false
	for _, r := range a.jobs {
		switch names := r.asg.GetNodeNames(); {
		case len(names) == 0:
			unnamed = true
		case slices.Contains(names, name):
			hit = append(hit, r)
		}
	}
	a.mu.Unlock()
	for _, r := range hit {
		a.log.Warn("peer lost; stopping job", zap.String("job", r.asg.GetJobId()), zap.String("node", name),
			zap.String("cause", failure.Cause(loss)))
		r.sup.PeerLost(time.Duration(r.asg.GetSpec().GetKillTimeoutMs())*time.Millisecond, loss)
	}
	if unnamed {
		go a.reportLoss(loss)
	}
}

// reportLoss tells the store of a loss gossip found; a store that cannot be
// reached learns it from gossip itself.
func (a *Agent) reportLoss(loss *musterv1.NodeLoss) {
	ctx, cancel := context.WithTimeout(a.ctx, reportLossTimeout)
	defer cancel()
	if _, err := a.client.ReportLoss(ctx, &musterv1.ReportLossRequest{Session: a.sessionID(), Loss: loss}); err != nil {
		a.log.Warn("could not report a node's loss to the store", zap.String("node", loss.GetNode()), zap.Error(err))
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
