package rendezvous

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Departures. An agent that shuts down says so first (Leave): its node is
// never a candidate again, and each of its jobs loses it as a node that
// left, which costs one restart; the agent then stops its workers. The node
// list remembers the departure: such a node shows left, never dead, and a
// departed node is forgotten after DepartedRetention.

// DepartedRetention is how long `launcher nodes` keeps listing a node that
// left or died and has no agent registered.
const DepartedRetention = 5 * time.Minute

// departure is what the store remembers of a node that left or died.
type departure struct {
	since     time.Time // when it left or died
	agentLeft bool      // its agent said it left (Leave)
}

// Leave marks the session's node as leaving: no round takes it, and every
// job it has a part in with restarts left goes on without it, as after the
// loss of a node that left the cluster. The node stays registered until its agent's stream
// ends, so that the workers' last events still reach the store.
func (s *Store) Leave(session, reason string) error {
	if len(reason) > maxLossDetail {
		return fmt.Errorf("leave: reason of %d bytes: %w", len(reason), ErrBadEvents)
	}
	_, err := s.Apply(&LeaveNode{Session: session, Reason: reason})
	return err
}

func (s *Store) leaveLocked(c *LeaveNode) error {
	reason := c.Reason
	n := s.nodes[c.Session]
	if n == nil {
		return fmt.Errorf("session %q: %w", c.Session, ErrNoSession)
	}
	if s.closed || n.leaving {
		return nil
	}
	name := n.info.GetName()
	n.leaving = true
	s.departedLocked(name).agentLeft = true
	s.log.Info("node leaving", zap.String("node", name), zap.String("reason", reason), zap.Int("jobs", len(n.jobs)))
	loss := failure.Loss(name, musterv1.LossSignal_LOSS_SIGNAL_LEFT, "", 0, reason)
	for _, id := range n.jobIDs() {
		// A job without restarts left ends as its workers here do: they
		// get SIGTERM, and their exits (the job's code) decide.
		if j := s.jobs[id]; j != nil && n.jobs[id] && !j.decided() && restartsLeft(j) {
			s.nodeLostLocked(j, n, loss)
		}
	}
	return nil
}

// departedLocked is the departure record of the named node, made now.
func (s *Store) departedLocked(name string) *departure {
	d := s.departed[name]
	if d == nil {
		d = &departure{}
		s.departed[name] = d
	}
	d.since = s.now()
	return d
}

// noteGossipLocked records a node's gossip state before it is applied: a
// node whose agent said it left is left, whatever gossip makes of its
// going, and a departure starts the node's retention.
func (s *Store) noteGossipLocked(name string, l *Liveness) {
	d := s.departed[name]
	if d != nil && d.agentLeft && l.State == GossipDead {
		l.State, l.Silent = GossipLeft, 0
	}
	old, known := s.liveness[name]
	if l.State != GossipAlive && (!known || old.State != l.State || d == nil) {
		left := d != nil && d.agentLeft
		s.departedLocked(name).agentLeft = left
	}
}

// forgetDepartedLocked says whether a node known only to gossip is to be
// listed no longer: it departed more than DepartedRetention ago. Such a
// node is forgotten. A node whose agent left is shown left.
func (s *Store) forgetDepartedLocked(name string, l *Liveness) bool {
	d := s.departed[name]
	if d == nil || (l.State == GossipAlive && !d.agentLeft) {
		return false
	}
	if s.now().Sub(d.since) > s.cfg.DepartedRetention {
		delete(s.liveness, name)
		delete(s.departed, name)
		return true
	}
	if d.agentLeft {
		l.State = GossipLeft
	}
	return false
}

// registeredLocked forgets the departure of a node whose agent registers.
func (s *Store) registeredLocked(name string) { delete(s.departed, name) }

// pruneDepartedLocked forgets departures past retention that gossip does
// not list: nodes outside gossip whose agents left.
func (s *Store) pruneDepartedLocked() {
	for name, d := range s.departed {
		if _, listed := s.liveness[name]; !listed && s.now().Sub(d.since) > s.cfg.DepartedRetention {
			delete(s.departed, name)
		}
	}
}
