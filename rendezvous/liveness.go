package rendezvous

import (
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/failure"
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
	// Silent, for a dead node, is how long gossip had no ack from it.
	Silent time.Duration
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
	s.noteGossipLocked(name, &l)
	if old, ok := s.liveness[name]; !ok || old.State != l.State {
		s.log.Info("gossip", zap.String("node", name), zap.String("state", l.State), zap.Duration("silent", l.Silent))
	}
	s.liveness[name] = l
	n := s.byName[name]
	if n == nil || n.placeholder {
		return
	}
	if l.State == GossipDead {
		s.suspectLocked(n, true, musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, l.Silent, "")
		return
	}
	s.clearSuspicionLocked(n)
}

// maxLossDetail bounds the free text of a reported loss.
const maxLossDetail = 1024

// ReportLoss applies an agent's word that gossip found a node lost to every
// job of the agent's node that has the lost node in its round: the agent
// stopped only the jobs whose nodes it knows, the store knows them all. The
// observer is the reporting node, whatever the report says.
func (s *Store) ReportLoss(session string, loss *musterv1.NodeLoss) error {
	if !isNodeName(loss.GetNode()) || len(loss.GetDetail()) > maxLossDetail {
		return fmt.Errorf("report of a loss: node name %q or its detail of %d bytes: %w", loss.GetNode(), len(loss.GetDetail()), ErrBadEvents)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[session]
	if n == nil {
		return fmt.Errorf("session %q: %w", session, ErrNoSession)
	}
	lost := s.byName[loss.GetNode()]
	if s.closed || lost == nil || lost == n || n.info.GetName() == s.cfg.OwnNode {
		return nil
	}
	s.suspectLocked(lost, false, reportedSignal(loss), time.Duration(loss.GetSilentMs())*time.Millisecond, n.info.GetName())
	return nil
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
			s.proposeLocked(&RemoveNode{Session: n.session, Loss: failure.Loss(name, musterv1.LossSignal_LOSS_SIGNAL_AGENT_GONE, "", 0, ""), Renewed: n.renewed})
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
		if s.byName[name] != nil || s.forgetDepartedLocked(name, &l) {
			continue
		}
		host, _, err := net.SplitHostPort(l.Addr)
		if err != nil {
			host = l.Addr
		}
		out = append(out, &musterv1.NodeStatus{Node: &musterv1.Node{Name: name, Addr: host, Rank: -1}, Gossip: l.State,
			NotRegistered: true})
	}
	return out
}

// reportedSignal is the signal of an agent's report: gossip's death, or a
// probe the store asked for; nothing else is an agent's to say.
func reportedSignal(loss *musterv1.NodeLoss) musterv1.LossSignal {
	if loss.GetSignal() == musterv1.LossSignal_LOSS_SIGNAL_SILENT {
		return musterv1.LossSignal_LOSS_SIGNAL_SILENT
	}
	return musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD
}
