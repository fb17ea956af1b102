package agent

import (
	"context"
	"time"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// leaveTimeout bounds how long a closing agent waits for the store to hear
// that it leaves: a store out of reach loses the node the usual way.
const leaveTimeout = 2 * time.Second

// leave tells the store this agent shuts down, before its workers stop:
// the store takes the node out of every round to come, so that its jobs'
// next rounds form without it, at the cost of one restart.
func (a *Agent) leave() {
	a.leaving.Store(true)
	if !a.client.Connected() {
		// A store out of reach (gone with its host, say) hears nothing:
		// waiting for it would only delay the workers' stop.
		a.log.Info("not telling the store this node leaves: no connection to it")
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, leaveTimeout)
	defer cancel()
	_, err := a.client.Leave(ctx, &musterv1.LeaveRequest{Session: a.sessionID(), Reason: "its agent shut down"})
	if err != nil {
		a.log.Warn("could not tell the store this node leaves", zap.String("error", storeclient.ErrorMessage(err)))
		return
	}
	a.log.Info("left the store: no round takes this node")
}

// StoreGone says the store will not come back (in agent run, it died with
// its host): the jobs' events still unsent are dropped, so that Close
// stops the workers without waiting to deliver them.
func (a *Agent) StoreGone() { a.storeGone() }
