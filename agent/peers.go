package agent

import (
	"context"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// reportLossTimeout bounds telling the store of a loss gossip found.
const reportLossTimeout = 5 * time.Second

// PeerLost tells the store that gossip found another node lost. The store
// decides: it knows every job's nodes, and takes a loss only once more than
// one view agrees (a node whose own link is bad sees healthy peers as dead).
// An agent that cannot reach its store at all stops its workers itself once
// its lease runs out (fence.go).
func (a *Agent) PeerLost(loss *musterv1.NodeLoss) {
	// Peers that end beside a leaving agent (agent run's other nodes, at
	// the job's end) are no loss to report: it holds no job of theirs.
	if loss.GetNode() == a.cfg.Name || a.leaving.Load() {
		return
	}
	loss.Observer = a.cfg.Name
	a.log.Info("gossip lost a peer; telling the store", zap.String("node", loss.GetNode()), zap.String("cause", failure.Cause(loss)))
	go a.reportLoss(loss)
}

// probeTimeout bounds a probe of a peer the store asked about.
const probeTimeout = time.Second

// probeDials is how many connections a probe tries at once: on a lossy link
// one lost SYN must not make a live node look gone.
const probeDials = 3

// probePeer tries to reach a node whose agent went silent to the store, on
// its gossip port over TCP, and tells the store when it cannot.
func (a *Agent) probePeer(p *musterv1.ProbePeer) {
	errs := make(chan error, probeDials)
	for range probeDials {
		go func() {
			conn, err := net.DialTimeout("tcp", p.GetAddr(), probeTimeout)
			if err == nil {
				conn.Close()
			}
			errs <- err
		}()
	}
	var err error
	for range probeDials {
		if err = <-errs; err == nil {
			return
		}
	}
	a.log.Info("a peer the store asked about is unreachable", zap.String("node", p.GetNode()), zap.String("addr", p.GetAddr()), zap.Error(err))
	a.reportLoss(&musterv1.NodeLoss{Node: p.GetNode(), Observer: a.cfg.Name, Signal: musterv1.LossSignal_LOSS_SIGNAL_SILENT,
		Detail: "no TCP answer from its gossip port"})
}

// reportLoss tells the store of a loss gossip found.
func (a *Agent) reportLoss(loss *musterv1.NodeLoss) {
	ctx, cancel := context.WithTimeout(a.ctx, reportLossTimeout)
	defer cancel()
	if _, err := a.client.ReportLoss(ctx, &musterv1.ReportLossRequest{Session: a.sessionID(), Loss: loss}); err != nil {
		a.log.Warn("could not report a node's loss to the store", zap.String("node", loss.GetNode()), zap.Error(err))
	}
}
