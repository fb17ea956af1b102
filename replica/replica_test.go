package replica

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/security"

	"github.com/musterhq/muster/testwait"
)

// freeAddrs returns n loopback store addresses whose next ports are free too.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(out) < n {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, a)
		p := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		if err != nil {
			continue
		}
		held = append(held, b)
		out = append(out, a.Addr().String())
	}
	return out
}

type testReplica struct {
	rep   *Replica
	store *rendezvous.Store
}

func startReplica(t *testing.T, addr string, peers []string, dir, token string) *testReplica {
	t.Helper()
	return startWith(t, Config{Addr: addr, Peers: peers, DataDir: dir, Security: security.Security{Token: token}})
}

// startWith starts the replica cfg describes, with a short heartbeat, and
// its store.
func startWith(t *testing.T, cfg Config) *testReplica {
	t.Helper()
	cfg.Logger = zaptest.NewLogger(t).Named(cfg.Addr)
	cfg.HeartbeatTimeout = 300 * time.Millisecond
	rep, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	store := rendezvous.NewStore(rendezvous.StoreConfig{Logger: cfg.Logger, Addr: cfg.Addr, Log: rep, ID: rep.StoreID()})
	if err := rep.Start(store); err != nil {
		t.Fatal(err)
	}
	return &testReplica{rep: rep, store: store}
}

// startJoining starts a replica new to a running store, which waits to be added.
func startJoining(t *testing.T, addr string, peers []string) *testReplica {
	t.Helper()
	return startWith(t, Config{Addr: addr, Peers: peers, DataDir: t.TempDir(), Security: security.Security{Token: "tok"}, Joining: true})
}

func (r *testReplica) close() {
	r.rep.Close()
	r.store.Close()
}

// leaderOf waits for one of rs to lead its store, and returns it.
func leaderOf(t *testing.T, rs []*testReplica) *testReplica {
	t.Helper()
	var lead *testReplica
	testwait.Until(t, 20*time.Second, "a replica to lead", func() bool {
		for _, r := range rs {
			if r != nil && r.store.Leading() {
				lead = r
				return true
			}
		}
		return false
	})
	return lead
}

// Three replicas: a node registered with the leader is in every replica's
// table; with the leader closed, another leads with the same table, and
// the node's agent takes its node back there with its key.
func TestReplicasKeepTheTableWhenTheLeaderGoes(t *testing.T) {
	addrs := freeAddrs(t, 3)
	var rs []*testReplica
	for _, a := range addrs {
		r := startReplica(t, a, addrs, t.TempDir(), "tok")
		t.Cleanup(r.close)
		rs = append(rs, r)
	}
	first := leaderOf(t, rs)
	info := &musterv1.Node{Name: "w1", Addr: "10.0.0.9", Rank: -1}
	session, err := first.store.Register(info, "key-w1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A follower refuses and names the leader.
	for _, r := range rs {
		if r == first {
			continue
		}
		_, err := r.store.Register(&musterv1.Node{Name: "w2", Addr: "10.0.0.8", Rank: -1}, "k", nil, nil)
		var nl *rendezvous.NotLeaderError
		if !errors.As(err, &nl) || nl.Leader != first.rep.cfg.Addr {
			t.Fatalf("follower %s: register: %v, want not-leader naming %s", r.rep.cfg.Addr, err, first.rep.cfg.Addr)
		}
	}
	testwait.Until(t, 20*time.Second, "every replica holds node w1", func() bool {
		for _, r := range rs {
			if len(r.store.Nodes()) != 1 {
				return false
			}
		}
		return true
	})
	first.close()
	var rest []*testReplica
	for _, r := range rs {
		if r != first {
			rest = append(rest, r)
		}
	}
	next := leaderOf(t, rest)
	got, err := next.store.Register(info, "key-w1", nil, nil)
	if err != nil || got != session {
		t.Fatalf("re-registration with the new leader: session %q, %v; want %q", got, err, session)
	}
	if st := next.rep.Status("n"); st.GetRole() != musterv1.ReplicaRole_REPLICA_ROLE_LEADER || st.GetTerm() < 2 || len(st.GetReplicas()) != 3 {
		t.Fatalf("new leader's status: %v", st)
	}
}

// A replica with another cluster token is not let in: it never learns the
// table, and the others log its refusal.
func TestReplicaWithAnotherTokenIsRefused(t *testing.T) {
	addrs := freeAddrs(t, 3)
	var good []*testReplica
	for _, a := range addrs[:2] {
		r := startReplica(t, a, addrs, t.TempDir(), "tok")
		t.Cleanup(r.close)
		good = append(good, r)
	}
	bad := startReplica(t, addrs[2], addrs, t.TempDir(), "other")
	t.Cleanup(bad.close)
	leader := leaderOf(t, good)
	if _, err := leader.store.Register(&musterv1.Node{Name: "w1", Addr: "10.0.0.9", Rank: -1}, "k", nil, nil); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the other good replica holds node w1", func() bool {
		for _, r := range good {
			if len(r.store.Nodes()) != 1 {
				return false
			}
		}
		return true
	})
	if bad.store.Leading() || len(bad.store.Nodes()) != 0 {
		t.Fatalf("the replica with another token leads or holds the table: %d nodes", len(bad.store.Nodes()))
	}
}

func TestCheckPeers(t *testing.T) {
	for _, tt := range []struct {
		peers []string
		want  string
	}{
		{[]string{"10.0.0.1:7070", "10.0.0.2:7070"}, ""},
		{[]string{"10.0.0.1"}, "want HOST:PORT"},
		{[]string{"0.0.0.0:7070"}, "not 0.0.0.0"},
		{[]string{"10.0.0.1:65535"}, "raft uses the next one"},
		{[]string{"a:1", "a:1"}, "listed twice"},
		{strings.Split("a:1,a:3,a:5,a:7,a:9,a:11,a:13,a:15", ","), "at most 7"},
	} {
		err := CheckPeers(tt.peers)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckPeers(%v) = %v, want %q", tt.peers, err, tt.want)
		}
	}
}

// Two of three replicas are lost for good: the third, started alone with
// its table, leads and holds the node registered before; a replica added
// back learns the table from it.
func TestReplicaRecoversAloneAfterItsQuorumIsLost(t *testing.T) {
	addrs := freeAddrs(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var rs []*testReplica
	for i, a := range addrs {
		rs = append(rs, startReplica(t, a, addrs, dirs[i], "tok"))
	}
	leader := leaderOf(t, rs)
	if _, err := leader.store.Register(&musterv1.Node{Name: "w1", Addr: "10.0.0.9", Rank: -1}, "key-w1", nil, nil); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "every replica holds node w1", func() bool {
		for _, r := range rs {
			if len(r.store.Nodes()) != 1 {
				return false
			}
		}
		return true
	})
	for _, r := range rs {
		r.close()
	}
	alone := startWith(t, Config{Addr: addrs[0], Peers: addrs, DataDir: dirs[0], Security: security.Security{Token: "tok"}, Alone: true})
	t.Cleanup(alone.close)
	leaderOf(t, []*testReplica{alone})
	if n := len(alone.store.Nodes()); n != 1 {
		t.Fatalf("the recovered replica holds %d nodes, want the 1 registered before", n)
	}
	if got := alone.rep.Replicas(); len(got) != 1 {
		t.Fatalf("replicas after recovery: %v, want this one alone", got)
	}
	fresh := startJoining(t, addrs[1], addrs)
	t.Cleanup(fresh.close)
	if _, err := alone.rep.Change(addrs[1], false); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the added replica holds node w1", func() bool { return len(fresh.store.Nodes()) == 1 })
}

// startedOnFirstLeader starts three replicas, registers node w1 with the
// first leader and submits a one-node job there, up to its queued start.
type startedOnFirstLeader struct {
	rs      []*testReplica
	first   *testReplica
	node    *musterv1.Node
	session string
	job     string
	start   *musterv1.Assignment
}

func startOnFirstLeader(t *testing.T) startedOnFirstLeader {
	t.Helper()
	addrs := freeAddrs(t, 3)
	var f startedOnFirstLeader
	for _, a := range addrs {
		r := startReplica(t, a, addrs, t.TempDir(), "tok")
		t.Cleanup(r.close)
		f.rs = append(f.rs, r)
	}
	f.first = leaderOf(t, f.rs)
	f.node = &musterv1.Node{Name: "w1", Addr: "10.0.0.9", Rank: -1}
	var err error
	if f.session, err = f.first.store.Register(f.node, "key-w1", nil, nil); err != nil {
		t.Fatal(err)
	}
	if f.job, err = f.first.store.Submit(&musterv1.JobSpec{Argv: [][]byte{[]byte("x")}, Nnodes: 1, Nproc: 1}, nil, ""); err != nil {
		t.Fatal(err)
	}
	out, _, err := f.first.store.Commands(f.session)
	if err != nil {
		t.Fatal(err)
	}
	var round string
	for _, c := range out.Take() {
		if r := c.GetReservePorts(); r != nil {
			round = r.GetRoundId()
		}
	}
	if err := f.first.store.PortsReserved(f.session, round, []int32{29500, 29501}, ""); err != nil {
		t.Fatal(err)
	}
	for _, c := range out.Take() {
		if a := c.GetStart(); a != nil {
			f.start = a
		}
	}
	if f.start == nil || f.start.GetJobId() != f.job {
		t.Fatalf("the first leader queued no start of job %s", f.job)
	}
	return f
}

// nextLeader closes the first leader, with what it queued unsent, and waits
// for another.
func (f startedOnFirstLeader) nextLeader(t *testing.T) *testReplica {
	t.Helper()
	f.first.close()
	var rest []*testReplica
	for _, r := range f.rs {
		if r != f.first {
			rest = append(rest, r)
		}
	}
	return leaderOf(t, rest)
}

// A job's assignment still queued when its leader died is sent again by the
// next leader when the node's agent, which never had it, registers there:
// the same round, the same NCCL unique ID.
func TestNewLeaderSendsALostAssignmentAgain(t *testing.T) {
	f := startOnFirstLeader(t)
	next := f.nextLeader(t)
	if _, err := next.store.Register(f.node, "key-w1", nil, nil); err != nil {
		t.Fatal(err)
	}
	out, _, err := next.store.Commands(f.session)
	if err != nil {
		t.Fatal(err)
	}
	var again *musterv1.Assignment
	for _, c := range out.Take() {
		if a := c.GetStart(); a != nil {
			again = a
		}
	}
	if again == nil || again.GetRoundId() != f.start.GetRoundId() || !bytes.Equal(again.GetNcclUniqueId(), f.start.GetNcclUniqueId()) {
		t.Fatalf("the new leader's start: %v, want the lost one again: %v", again, f.start)
	}
}

// A stop still queued when its leader died is sent again by the next
// leader when the node's agent registers there reporting the job.
func TestNewLeaderSendsALostStopAgain(t *testing.T) {
	f := startOnFirstLeader(t)
	if _, err := f.first.store.Cancel(f.job, false, "cancelled", 130); err != nil {
		t.Fatal(err)
	}
	next := f.nextLeader(t)
	asg := f.start
	report := &musterv1.RunningJob{JobId: f.job, RoundId: asg.GetRoundId(), Spec: asg.GetSpec(), NodeRank: 0, Nnodes: 1, Nproc: 1,
		WorldSize: 1, JobToken: asg.GetJobToken(), Ranks: []*musterv1.RankState{{Rank: 0}}}
	if _, err := next.store.Register(f.node, "key-w1", []*musterv1.RunningJob{report}, nil); err != nil {
		t.Fatal(err)
	}
	out, _, _ := next.store.Commands(f.session)
	stopped := false
	for _, c := range out.Take() {
		stopped = stopped || c.GetStop().GetJobId() == f.job
	}
	if !stopped {
		t.Fatalf("the new leader did not send job %s's stop again", f.job)
	}
}
