package rendezvous

import (
	"strings"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// listed returns the node list's row of the named node, or nil.
func listed(s *Store, name string) *musterv1.NodeStatus {
	for _, st := range s.Nodes() {
		if st.GetNode().GetName() == name {
			return st
		}
	}
	return nil
}

// The node list: a node whose agent left shows left whatever gossip makes
// of it; departed nodes go after DepartedRetention; alive members not
// registered are marked; a leaving node is no candidate.
func TestDepartures(t *testing.T) {
	tests := []struct {
		name   string
		leave  bool   // a's agent leaves, then its node is removed
		gossip string // then gossip says this of a
		after  time.Duration
		want   string // a's row's gossip state; "" for no row
	}{
		{name: "left, gossip says dead", leave: true, gossip: GossipDead, want: GossipLeft},
		{name: "left, gossip says left", leave: true, gossip: GossipLeft, want: GossipLeft},
		{name: "left, gossip still alive", leave: true, gossip: GossipAlive, want: GossipLeft},
		{name: "died", gossip: GossipDead, want: GossipDead},
		{name: "left, forgotten", leave: true, gossip: GossipLeft, after: DepartedRetention + time.Second},
		{name: "died, forgotten", gossip: GossipDead, after: DepartedRetention + time.Second},
		{name: "died, kept", gossip: GossipDead, after: DepartedRetention - time.Second, want: GossipDead},
		{name: "alive kept", gossip: GossipAlive, after: DepartedRetention + time.Second, want: GossipAlive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Gossip's word alone is a node's loss here: its agent renews no lease.
			s := newStrictStore(t, func(c *StoreConfig) { c.RenewSilence = -1 })
			now := time.Unix(1000, 0)
			s.clock = func() time.Time { return now }
			s.SetLiveness("a", Liveness{State: GossipAlive, Addr: "10.0.0.1:7946"})
			session, err := s.Register(&musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1}, "k", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.leave {
				if err := s.Leave(session, "test"); err != nil {
					t.Fatal(err)
				}
				if st := listed(s, "a"); !st.GetLeaving() || st.GetNotRegistered() {
					t.Fatalf("leaving node listed as %v", st)
				}
				_, gone, _ := s.Commands(session)
				s.Disconnected(session, gone, "test")
			}
			s.SetLiveness("a", Liveness{State: tt.gossip, Addr: "10.0.0.1:7946"})
			if !tt.leave && tt.gossip == GossipAlive {
				_, gone, _ := s.Commands(session)
				s.Disconnected(session, gone, "test")
			}
			now = now.Add(tt.after)
			st := listed(s, "a")
			switch {
			case tt.want == "" && st != nil:
				t.Fatalf("listed: %v", st)
			case tt.want == "":
			case st == nil:
				t.Fatalf("not listed; want %s", tt.want)
			case st.GetGossip() != tt.want || !st.GetNotRegistered():
				t.Fatalf("listed as %v; want %s, not registered", st, tt.want)
			}
		})
	}
}

// A leaving node is never a candidate: a job waits rather than take it.
func TestLeavingNodeNoCandidate(t *testing.T) {
	s := newStrictStore(t)
	a, err := s.Register(&musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1}, "k", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Leave(a, "test"); err != nil {
		t.Fatal(err)
	}
	spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 1, Nproc: 1, KillTimeoutMs: 1000}
	// Without a wait, the job fails at once: no node to take.
	if _, err := s.Submit(spec, nil, ""); err == nil || !strings.Contains(err.Error(), "node a is leaving") {
		t.Fatalf("job with only a leaving node: %v", err)
	}
	if err := s.Leave("s-none", "test"); err == nil {
		t.Fatal("leave of an unknown session: no error")
	}
}
