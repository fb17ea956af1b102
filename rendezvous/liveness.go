package rendezvous

import (
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Liveness: the store's view of nodes combines registration with gossip.
// A node is lost on whichever signal comes first: its agent's stream broke
// and its agent is gone (AgentGone), or gossip declared it dead.

// Gossip states of a node, as `launcher nodes` shows them.
const (
	GossipAlive = "alive"
	GossipDead  = "dead"
	GossipLeft  = "left"
)

// Liveness is what gossip says of one node.
type Liveness struct {
	State string // GossipAlive, GossipDead or GossipLeft
	Addr  string // the node's gossip host:port
	// Reason, for a dead node, says why: "no gossip ack for 1.3 s".
	Reason string
}

// maxLiveness bounds the gossip view: nodes known only to gossip, past that
// many entries, are forgotten, dead and left ones first.
const maxLiveness = 2 * jobspec.MaxNodes

// agentGoneTimeout bounds the check that a disconnected node's agent is gone.
const agentGoneTimeout = time.Second

// SetLiveness records what gossip says of the named node. A registered node
// declared dead is lost at once, and its jobs with it.
func (s *Store) SetLiveness(name string, l Liveness) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if _, known := s.liveness[name]; !known && len(s.liveness) >= maxLiveness {
		s.forgetOneLocked()
	}
	if old, ok := s.liveness[name]; !ok || old.State != l.State {
		s.log.Info("gossip", zap.String("node", name), zap.String("state", l.State), zap.String("reason", l.Reason))
	}
	s.liveness[name] = l
	if l.State != GossipDead {
		return
	}
	if n := s.byName[name]; n != nil && !n.placeholder {
		reason := l.Reason
		if reason == "" {
			reason = "declared dead by gossip"
		}
		s.removeNodeLocked(n, reason)
	}
}

// forgetOneLocked drops one gossip entry, a departed node's if there is one.
func (s *Store) forgetOneLocked() {
	victim := ""
	for name, l := range s.liveness {
		if s.byName[name] != nil {
			continue
		}
		victim = name
		if l.State != GossipAlive {
			break
		}
	}
	delete(s.liveness, victim)
}

// checkAgentGone asks, once a busy node's stream broke, whether its agent is
// gone; a gone agent's node is lost at once instead of after the grace.
func (s *Store) checkAgentGone(n *node, stream <-chan struct{}) {
	if s.cfg.AgentGone == nil {
		return
	}
	name := n.info.GetName()
	go func() {
		gone := s.cfg.AgentGone(name, agentGoneTimeout)
		s.log.Debug("agent gone check", zap.String("node", name), zap.Bool("gone", gone))
		if !gone {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed && s.byName[name] == n && !n.connected && n.gone == stream {
			s.removeNodeLocked(n, "agent connection closed")
		}
	}()
}

// gossipStatusLocked fills a node's gossip state in, when gossip knows it.
func (s *Store) gossipStatusLocked(st *musterv1.NodeStatus) {
	if l, ok := s.liveness[st.GetNode().GetName()]; ok {
		st.Gossip = l.State
	}
}

// gossipOnlyLocked lists the nodes gossip knows and the store has not
// registered: starting, dead, or left.
func (s *Store) gossipOnlyLocked() []*musterv1.NodeStatus {
	var out []*musterv1.NodeStatus
	for name, l := range s.liveness {
		if s.byName[name] != nil {
			continue
		}
		host, _, err := net.SplitHostPort(l.Addr)
		if err != nil {
			host = l.Addr
		}
		out = append(out, &musterv1.NodeStatus{Node: &musterv1.Node{Name: name, Addr: host, Rank: -1}, Gossip: l.State})
	}
	return out
}
