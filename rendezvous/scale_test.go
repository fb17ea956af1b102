package rendezvous

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// registerMany registers n nodes straight with the store and returns their
// sessions by name order (node-00000, node-00001, ...).
func registerMany(t *testing.T, s *Store, n int) []string {
	t.Helper()
	sessions := make([]string, n)
	for i := range sessions {
		sess, err := s.Register(&musterv1.Node{Name: fmt.Sprintf("node-%05d", i),
			Addr: fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), Rank: -1}, "", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions[i] = sess
	}
	return sessions
}

func pending(t *testing.T, s *Store, session string) []*musterv1.AgentCommand {
	t.Helper()
	out, _, err := s.Commands(session)
	if err != nil {
		t.Fatal(err)
	}
	return out.Take()
}

// startRound submits an n-node job and completes its round.
func startRound(t *testing.T, s *Store, sessions []string) string {
	t.Helper()
	id, err := s.Submit(&musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: int32(len(sessions)), Nproc: 1}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	cmds := pending(t, s, sessions[0])
	if len(cmds) != 1 || cmds[0].GetReservePorts() == nil {
		t.Fatalf("node rank 0 got %v, want one ReservePorts", cmds)
	}
	if err := s.PortsReserved(sessions[0], cmds[0].GetReservePorts().GetRoundId(), []int32{29500, 29501}, ""); err != nil {
		t.Fatal(err)
	}
	return id
}

// A large job's assignments do not grow with its nodes: only node rank 0's
// carries the roster; every worker can read the addresses from its KV.
func TestLargeRoundAssignmentsStaySmall(t *testing.T) {
	const n = 2000
	s := newStrictStore(t)
	sessions := registerMany(t, s, n)
	id := startRound(t, s, sessions)
	var largest int
	for rank, sess := range sessions {
		cmds := pending(t, s, sess)
		if len(cmds) != 1 || cmds[0].GetStart() == nil {
			t.Fatalf("node rank %d got %v, want one Start", rank, cmds)
		}
		asg := cmds[0].GetStart()
		if asg.GetNodeRank() != int32(rank) || asg.GetNnodes() != n {
			t.Fatalf("node rank %d got node rank %d of %d", rank, asg.GetNodeRank(), asg.GetNnodes())
		}
		if rank == 0 {
			if len(asg.GetNodeAddrs()) != n || len(asg.GetNodeNames()) != n || len(asg.GetNodeSlots()) != n {
				t.Fatalf("node rank 0 lacks the roster")
			}
			continue
		}
		if len(asg.GetNodeAddrs()) != 0 {
			t.Fatalf("node rank %d got the roster", rank)
		}
		largest = max(largest, proto.Size(cmds[0]))
	}
	if largest > 1024 {
		t.Errorf("an assignment is %d bytes", largest)
	}
	v, _, err := s.KV().Space(id).Get(t.Context(), RosterKey, false)
	if err != nil || len(strings.Fields(string(v))) != n {
		t.Fatalf("roster in KV: %d addresses, %v", len(strings.Fields(string(v))), err)
	}
}

// A small job's assignments all carry the roster, for MUSTER_NODE_ADDRS and
// the hostfile on every node.
func TestSmallRoundAssignmentsCarryTheRoster(t *testing.T) {
	s := newStrictStore(t)
	sessions := registerMany(t, s, 3)
	startRound(t, s, sessions)
	for rank, sess := range sessions {
		if asg := pending(t, s, sess)[0].GetStart(); strings.Join(asg.GetNodeAddrs(), " ") != "10.0.0.0 10.0.0.1 10.0.0.2" {
			t.Fatalf("node rank %d got addresses %v", rank, asg.GetNodeAddrs())
		}
	}
}

// Nodes lost one after another stop a job once: every other node gets one
// Stop, not one per lost node, and no healthy node is removed.
func TestLostNodesStopAJobOnce(t *testing.T) {
	const n, lost = 500, 200
	s := newStrictStore(t)
	sessions := registerMany(t, s, n)
	startRound(t, s, sessions)
	for _, sess := range sessions {
		pending(t, s, sess)
	}
	for _, sess := range sessions[:lost] {
		s.mu.Lock()
		s.removeNodeLocked(s.nodes[sess], testLoss)
		s.mu.Unlock()
	}
	for rank, sess := range sessions[lost:] {
		cmds := pending(t, s, sess)
		if len(cmds) != 1 || cmds[0].GetStop() == nil {
			t.Fatalf("node rank %d got %d commands, want one Stop", lost+rank, len(cmds))
		}
	}
	if got := len(s.Nodes()); got != n-lost {
		t.Fatalf("%d nodes left, want %d", got, n-lost)
	}
}

// Cancels repeated while an agent reads nothing coalesce: its queue holds
// one Stop with the shortest grace, and the agent is not removed.
func TestStopsCoalesceForASlowAgent(t *testing.T) {
	s := newStrictStore(t)
	sessions := registerMany(t, s, 2)
	id := startRound(t, s, sessions)
	for i := 0; i < 3*maxPending; i++ {
		if _, err := s.Cancel(id, i == 10, "test", 1); err != nil {
			t.Fatal(err)
		}
	}
	cmds := pending(t, s, sessions[1])
	if len(cmds) != 2 || cmds[0].GetStart() == nil || cmds[1].GetStop() == nil || cmds[1].GetStop().GetKillTimeoutMs() != 0 {
		t.Fatalf("slow node holds %v, want its Start and one forced Stop", cmds)
	}
	if len(s.Nodes()) != 2 {
		t.Fatal("a node was removed")
	}
	// Coalescing in the queue itself: stops of one job merge, the shortest
	// grace wins.
	o := newOutbox()
	for _, ms := range []int64{5000, 100, 3000} {
		o.push(&musterv1.AgentCommand{Command: &musterv1.AgentCommand_Stop{Stop: &musterv1.StopJob{JobId: "j", KillTimeoutMs: ms}}})
	}
	if got := o.Take(); len(got) != 1 || got[0].GetStop().GetKillTimeoutMs() != 100 {
		t.Fatalf("queue holds %v", got)
	}
}

// Registering again under a name replaces the earlier node, found by name.
func TestRegisterAgainReplaces(t *testing.T) {
	s := newStrictStore(t)
	sessions := registerMany(t, s, 3)
	// Another agent under a connected node's name is refused: two live
	// agents of one name would evict each other forever.
	if _, err := s.Register(&musterv1.Node{Name: "node-00001", Addr: "10.9.9.9", Rank: -1}, "other", nil, nil); !errors.Is(err, ErrNodeTaken) {
		t.Fatalf("a second live agent of node-00001: %v, want ErrNodeTaken", err)
	}
	_, gone, err := s.Commands(sessions[1])
	if err != nil {
		t.Fatal(err)
	}
	s.Disconnected(sessions[1], gone, "test")
	again, err := s.Register(&musterv1.Node{Name: "node-00001", Addr: "10.9.9.9", Rank: -1}, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Commands(sessions[1]); err == nil {
		t.Fatal("the earlier session of node-00001 still exists")
	}
	nodes := s.Nodes()
	if len(nodes) != 3 || nodes[1].GetNode().GetAddr() != "10.9.9.9" {
		t.Fatalf("nodes %v", nodes)
	}
	s.mu.Lock()
	s.removeNodeLocked(s.nodes[again], testLoss)
	s.mu.Unlock()
	if _, err := s.Register(&musterv1.Node{Name: "node-00001", Addr: "10.9.9.8", Rank: -1}, "", nil, nil); err != nil || len(s.Nodes()) != 3 {
		t.Fatalf("register after removal: %v, %d nodes", err, len(s.Nodes()))
	}
}
