package rendezvous

import (
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Node health. Before a node starts a round's workers its agent checks the
// node and reports the result (ReportHealth). The store keeps it as the
// node's last health, which `launcher nodes` shows; a node that failed is
// left out of the job's rounds for the rest of the job, and the round it
// failed in starts again without it, not counted as a restart: another
// node takes its place when one fits (a spare), and otherwise the round
// waits for one, or the job fails saying which node failed and why.

// Bounds on a health report.
const (
	maxHealthReason = 4 << 10
	maxHealthCheck  = 256
)

// ReportHealth records a node's health check, made for a round of a job;
// a failure leaves the node out of that job's rounds.
func (s *Store) ReportHealth(session, jobID, roundID string, h *musterv1.NodeHealth) error {
	if h == nil || len(h.GetReason()) > maxHealthReason || len(h.GetCheck()) > maxHealthCheck {
		return fmt.Errorf("health report: missing, or its reason or check too long: %w", ErrBadEvents)
	}
	_, err := s.Apply(&RecordHealth{Session: session, JobID: jobID, RoundID: roundID, Health: h})
	return err
}

func (s *Store) recordHealthLocked(c *RecordHealth) error {
	jobID, roundID := c.JobID, c.RoundID
	n := s.nodes[c.Session]
	if n == nil {
		return fmt.Errorf("session %q: %w", c.Session, ErrNoSession)
	}
	h := proto.Clone(c.Health).(*musterv1.NodeHealth)
	h.JobId = jobID
	n.health = h
	j := s.jobs[jobID]
	if h.GetOk() || j == nil || j.finished() || !n.jobs[jobID] {
		return nil
	}
	s.unhealthyLocked(j, n, roundID, h)
	return nil
}

// unhealthyLocked leaves n out of j's rounds, and starts the round it
// failed in again without it.
func (s *Store) unhealthyLocked(j *job, n *node, roundID string, h *musterv1.NodeHealth) {
	p := s.placementOf(j)
	if p.unhealthy == nil {
		p.unhealthy = map[string]*musterv1.NodeHealth{}
	}
	name := n.info.GetName()
	p.unhealthy[name] = h
	reason := describeUnhealthy(name, h)
	s.log.Warn("node left out of a job's rounds", zap.String("job", j.id), zap.String("node", name), zap.String("reason", reason))
	r := j.round
	if _, ofRound := r.rank[n]; r.id != roundID || !ofRound || r.restart || j.decided() {
		return
	}
	s.restartLocked(j, reason, false)
}

// describeUnhealthy says why a node is left out of a job's rounds.
func describeUnhealthy(node string, h *musterv1.NodeHealth) string {
	s := "node " + node + " failed its health check"
	if c := h.GetCheck(); c != "" {
		s += " (" + c + ")"
	}
	if r := h.GetReason(); r != "" {
		s += ": " + r
	}
	return s
}
