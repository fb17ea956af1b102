package rendezvous_test

import (
	"context"
	"strings"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

// startsOf takes each agent's next command, which must be an assignment.
func startsOf(t *testing.T, agents ...*testAgent) []*musterv1.Assignment {
	t.Helper()
	var out []*musterv1.Assignment
	for _, a := range agents {
		st := a.next().GetStart()
		if st == nil {
			t.Fatal("no assignment")
		}
		out = append(out, st)
	}
	return out
}

// stopsOf takes each agent's next command, which must stop the job, and
// returns the reason.
func stopsOf(t *testing.T, agents ...*testAgent) string {
	t.Helper()
	reason := ""
	for _, a := range agents {
		st := a.next().GetStop()
		if st == nil {
			t.Fatal("no stop")
		}
		reason = st.GetReason()
	}
	return reason
}

// An elastic round forms with its least nodes after the last call; a node
// that comes later starts a new round with it, not counted as a restart.
func TestElasticRoundLastCallAndGrowth(t *testing.T) {
	t.Parallel()
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.1", 0, 0)
	b := newTestAgent(t, c, "b", "10.0.0.2", 1, 0)
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
		Nnodes: 3, MinNodes: 2, Nproc: 2, LastCallMs: 300, WaitTimeoutMs: 10_000, MaxRestarts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	reservePorts(t, c, a, 1000, 1001)
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("the round formed %s after submission, before its last call", waited)
	}
	for _, asg := range startsOf(t, a, b) {
		if asg.Nnodes != 2 || asg.WorldSize != 4 || asg.RestartCount != 0 || asg.RoundNumber != 0 || asg.MaxRestarts != 1 {
			t.Fatalf("round 0: %d nodes, world %d, restart %d, round %d, most restarts %d",
				asg.Nnodes, asg.WorldSize, asg.RestartCount, asg.RoundNumber, asg.MaxRestarts)
		}
	}
	evs := watchEvents(t, c, sub.JobId)
	cn := newTestAgent(t, c, "c", "10.0.0.3", 2, 0)
	if reason := stopsOf(t, a, b); !strings.Contains(reason, "node c joined") {
		t.Fatalf("stop reason %q", reason)
	}
	if err := a.publish(exited(sub.JobId, 0, 0, 15, true), exited(sub.JobId, 1, 0, 15, true)); err != nil {
		t.Fatal(err)
	}
	if err := b.publish(exited(sub.JobId, 2, 0, 15, true), exited(sub.JobId, 3, 0, 15, true)); err != nil {
		t.Fatal(err)
	}
	re := nextEvent(t, evs, "restart event", func(ev *musterv1.JobEvent) bool { return ev.GetRestarting() != nil }).GetRestarting()
	if re.Counted || re.RestartCount != 0 {
		t.Fatalf("a node joining counted as a restart: %v", re)
	}
	// Three nodes: the round forms at once, without a last call.
	reservePorts(t, c, a, 1002, 1003)
	for _, asg := range startsOf(t, a, b, cn) {
		if asg.Nnodes != 3 || asg.WorldSize != 6 || asg.RestartCount != 0 || asg.RoundNumber != 1 {
			t.Fatalf("round 1: %d nodes, world %d, restart %d, round %d", asg.Nnodes, asg.WorldSize, asg.RestartCount, asg.RoundNumber)
		}
	}
}

// A failed worker starts a new round while the job has restarts left,
// counted job-wide; the failure after the last one fails the job with its
// exit code.
func TestRestartsAfterFailureAreJobWide(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.1", 0, 0)
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
		Nnodes: 1, Nproc: 2, MaxRestarts: 2, KillTimeoutMs: 100}})
	if err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, c, sub.JobId)
	for restart := int32(0); restart <= 2; restart++ {
		reservePorts(t, c, a, 1000+2*restart, 1001+2*restart)
		asg := startsOf(t, a)[0]
		if asg.RestartCount != restart || asg.RoundNumber != restart {
			t.Fatalf("round %d: restart count %d", asg.RoundNumber, asg.RestartCount)
		}
		if err := a.publish(exited(sub.JobId, 1, 7, 0, false)); err != nil {
			t.Fatal(err)
		}
		if restart == 2 {
			break
		}
		if reason := stopsOf(t, a); !strings.Contains(reason, "exited with code 7") {
			t.Fatalf("stop reason %q", reason)
		}
		re := nextEvent(t, evs, "restart event", func(ev *musterv1.JobEvent) bool { return ev.GetRestarting() != nil }).GetRestarting()
		if !re.Counted || re.RestartCount != restart+1 || re.MaxRestarts != 2 {
			t.Fatalf("restart event %v", re)
		}
		if err := a.publish(exited(sub.JobId, 0, 0, 15, true)); err != nil {
			t.Fatal(err)
		}
	}
	a.next() // the stop of the last round
	if err := a.publish(exited(sub.JobId, 0, 0, 15, true)); err != nil {
		t.Fatal(err)
	}
	fin := nextFinished(t, evs)
	if fin.ExitCode != 7 || !strings.Contains(fin.Summary, "exited with code 7") {
		t.Fatalf("final: %v", fin)
	}
}

// elasticPair registers nodes a (node rank 0) and b and submits a job of
// one or two nodes, one worker each, with one restart.
func elasticPair(t *testing.T) (*storeserver.Server, *storeclient.Client, *testAgent, *testAgent, *musterv1.SubmitResponse) {
	t.Helper()
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.1", 0, 0)
	b := newTestAgent(t, c, "b", "10.0.0.2", 1, 0)
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
		Nnodes: 2, MinNodes: 1, Nproc: 1, MaxRestarts: 1, WaitTimeoutMs: 10_000}})
	if err != nil {
		t.Fatal(err)
	}
	return s, c, a, b, sub
}

// A lost node starts a new round without it while restarts are left, also
// when one of its peers reported the loss and the node is still
// registered; the new round does not take that node.
func TestLostNodeStartsANewRound(t *testing.T) {
	for _, tt := range []struct {
		name string
		lose func(t *testing.T, s *storeserver.Server, a *testAgent, job string)
	}{
		{"gossip says it died", func(t *testing.T, s *storeserver.Server, _ *testAgent, _ string) {
			s.Store().SetLiveness("b", rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 1200 * time.Millisecond})
		}},
		{"a peer's agent reported it", func(t *testing.T, _ *storeserver.Server, a *testAgent, job string) {
			if _, err := a.c.ReportLoss(context.Background(), &musterv1.ReportLossRequest{Session: a.session, Loss: &musterv1.NodeLoss{
				Node: "b", Signal: musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, SilentMs: 1200}}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, c, a, b, sub := elasticPair(t)
			reservePorts(t, c, a, 1000, 1001)
			startsOf(t, a, b)
			tt.lose(t, s, a, sub.JobId)
			if reason := stopsOf(t, a); !strings.Contains(reason, "node b lost") {
				t.Fatalf("stop reason %q", reason)
			}
			// The worker a stopped itself may report again: nothing changes.
			if err := a.publish(exited(sub.JobId, 0, 0, 15, true)); err != nil {
				t.Fatal(err)
			}
			reservePorts(t, c, a, 1002, 1003)
			asg := startsOf(t, a)[0]
			if asg.Nnodes != 1 || asg.RestartCount != 1 || asg.WorldSize != 1 {
				t.Fatalf("new round: %d nodes, restart %d, world %d", asg.Nnodes, asg.RestartCount, asg.WorldSize)
			}
		})
	}
}

// TestTCPStoreMovesWithNodeRankZero: when node rank 0 is lost, the next
// round's node rank 0 serves the job's TCPStore; the lost node, which may
// still hold the old one, is told to release it when it registers again.
func TestTCPStoreMovesWithNodeRankZero(t *testing.T) {
	s, c, a, b, sub := elasticPair(t)
	if res := reservePorts(t, c, a, 1000, 1001); !res.GetAgentStore() {
		t.Fatalf("node rank 0 not asked for the TCPStore: %v", res)
	}
	startsOf(t, a, b)
	s.Store().SetLiveness("a", rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 1200 * time.Millisecond})
	stopsOf(t, b)
	if err := b.publish(exited(sub.JobId, 1, 0, 15, true)); err != nil {
		t.Fatal(err)
	}
	if res := reservePorts(t, c, b, 2000, 2001); !res.GetAgentStore() {
		t.Fatalf("the new node rank 0 not asked for the TCPStore: %v", res)
	}
	startsOf(t, b)
	if err := b.publish(exited(sub.JobId, 0, 0, 0, false)); err != nil {
		t.Fatal(err)
	}
	if fin := finalEvent(t, c, sub.JobId); fin.GetExitCode() != 0 {
		t.Fatalf("job ended %v", fin)
	}
	if cmd := b.nextAny(); cmd.GetReleaseStore().GetJobId() != sub.JobId {
		t.Fatalf("b: %v, want its TCPStore released", cmd)
	}
	// Back, a reports the TCPStore it still serves, and is told to close it.
	back := registerTestAgent(t, c, &musterv1.RegisterRequest{Node: &musterv1.Node{Name: "a", Addr: "10.0.0.1"},
		TorchStores: []string{sub.JobId}})
	if cmd := back.nextAny(); cmd.GetReleaseStore().GetJobId() != sub.JobId {
		t.Fatalf("a, back: %v, want the old TCPStore released", cmd)
	}
}

// A registration that reports a TCPStore for a job the store does not run
// (it ended, or a restarted store never saw it) is told to close it; one
// for a job that still needs it there is not.
func TestRegistrationReleasesUnneededTCPStores(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := registerTestAgent(t, c, &musterv1.RegisterRequest{Node: &musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1},
		TorchStores: []string{"j-000000000000"}})
	if cmd := a.nextAny(); cmd.GetReleaseStore().GetJobId() != "j-000000000000" {
		t.Fatalf("%v, want the TCPStore of an unknown job released", cmd)
	}
}
