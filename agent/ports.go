package agent

import (
	"context"
	"net"
	"time"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// portsReportTimeout bounds telling the store which ports are reserved.
const portsReportTimeout = 10 * time.Second

// reservePorts binds free ports on the node's address and holds them until
// the round's workers start, so that no other program takes them meanwhile;
// the first is the job's TCPStore when the agent serves it.
func (a *Agent) reservePorts(ctx context.Context, r *musterv1.ReservePorts) {
	req := &musterv1.PortsReservedRequest{Session: a.sessionID(), RoundId: r.GetRoundId()}
	count := r.GetCount()
	if r.GetAgentStore() && count > 0 {
		// MASTER_PORT is the job's TCPStore here, held for the job's life.
		port, err := a.torchStorePort(r.GetJobId(), r.GetRoundId())
		if err != nil {
			req.Error = "the job's TCPStore: " + err.Error()
			count = 0
		} else {
			req.Ports = append(req.Ports, port)
			count--
		}
	}
	var held []net.Listener
	for i := int32(0); i < count && i < 16; i++ {
		l, err := net.Listen("tcp", net.JoinHostPort(a.cfg.Addr, "0"))
		if err != nil {
			req.Error = err.Error()
			break
		}
		held = append(held, l)
		req.Ports = append(req.Ports, int32(l.Addr().(*net.TCPAddr).Port))
	}
	a.mu.Lock()
	a.ports[r.GetRoundId()] = held
	a.mu.Unlock()
	// A store that does not answer must not hold the job's commands forever.
	ctx, cancel := context.WithTimeout(ctx, portsReportTimeout)
	defer cancel()
	if _, err := a.client.PortsReserved(ctx, req); err != nil {
		a.log.Warn("reporting reserved ports failed", zap.Error(err))
		a.releasePorts(r.GetRoundId())
	}
}

func (a *Agent) releasePorts(round string) {
	a.mu.Lock()
	held := a.ports[round]
	delete(a.ports, round)
	a.mu.Unlock()
	for _, l := range held {
		l.Close()
	}
}
