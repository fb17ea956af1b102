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

// leaseCluster starts a store with the given lease bounds and registers
// nodes a (node rank 0), b, c and d; a two-node job with one restart runs
// on a and b.
func leaseCluster(t *testing.T, fence, silence time.Duration) (*storeserver.Server, *storeclient.Client, []*testAgent, string) {
	t.Helper()
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.FenceAfter, c.RenewSilence = fence, silence })
	c := rendezvoustest.NewClient(t, s, security.Security{})
	var agents []*testAgent
	for i, name := range []string{"a", "b", "c", "d"} {
		agents = append(agents, newTestAgent(t, c, name, "10.0.0."+string(rune('1'+i)), int32(i), 0))
	}
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
		Nnodes: 2, Nproc: 1, MaxRestarts: 1, WaitTimeoutMs: 60_000, KillTimeoutMs: 100}})
	if err != nil {
		t.Fatal(err)
	}
	reservePorts(t, c, agents[0], 1000, 1001)
	startsOf(t, agents[0], agents[1])
	return s, c, agents, sub.JobId
}

func jobState(t *testing.T, c *storeclient.Client, job string) musterv1.JobState {
	t.Helper()
	resp, err := c.ListJobs(context.Background(), &musterv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range resp.GetJobs() {
		if j.GetJobId() == job {
			return j.GetState()
		}
	}
	t.Fatalf("job %s not listed", job)
	return 0
}

// A store that loses most of its nodes at once is more likely the one cut
// off: it fails no job for them, and forgets the suspicions when gossip
// hears from the nodes again.
func TestStoreSuspectsItselfFirst(t *testing.T) {
	t.Parallel()
	s, c, _, job := leaseCluster(t, time.Hour, time.Nanosecond)
	for _, name := range []string{"b", "c", "d"} {
		s.Store().SetLiveness(name, rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 5 * time.Second})
	}
	// The held suspicions are looked at again every quarter second.
	for range 8 {
		if st := jobState(t, c, job); st != musterv1.JobState_JOB_STATE_RUNNING {
			t.Fatalf("job %s while the store suspects itself", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, name := range []string{"b", "c", "d"} {
		s.Store().SetLiveness(name, rendezvous.Liveness{State: rendezvous.GossipAlive})
	}
	if st := jobState(t, c, job); st != musterv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("job %s after the nodes came back", st)
	}
}

// A loss the store held, suspecting itself, is taken when another node's
// agent confirms it, or once the node has been silent for the fence bound
// (its workers are gone then, whichever side was cut off).
func TestHeldLossTakenWhenConfirmedOrFenced(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		fence   time.Duration
		confirm bool
		want    string
	}{
		{"a peer confirms", time.Hour, true, "confirmed by node a"},
		{"silent past the fence", 300 * time.Millisecond, false, "no gossip ack for 5.0 s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, c, agents, _ := leaseCluster(t, tt.fence, time.Nanosecond)
			for _, name := range []string{"b", "c", "d"} {
				s.Store().SetLiveness(name, rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 5 * time.Second})
			}
			if tt.confirm {
				if _, err := c.ReportLoss(context.Background(), &musterv1.ReportLossRequest{Session: agents[0].session,
					Loss: &musterv1.NodeLoss{Node: "b", Signal: musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, SilentMs: 5000}}); err != nil {
					t.Fatal(err)
				}
			}
			if reason := stopsOf(t, agents[0]); !strings.Contains(reason, "node b lost") || !strings.Contains(reason, tt.want) {
				t.Fatalf("stop reason %q, want %q in it", reason, tt.want)
			}
		})
	}
}

// Gossip's word that a node died is no loss while its agent still renews
// its lease: it is the gossip path (or the reporter) that is bad.
func TestSuspicionNeedsTheAgentSilentToo(t *testing.T) {
	t.Parallel()
	s, c, agents, job := leaseCluster(t, time.Nanosecond, time.Hour)
	s.Store().SetLiveness("b", rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 5 * time.Second})
	if _, err := c.ReportLoss(context.Background(), &musterv1.ReportLossRequest{Session: agents[0].session,
		Loss: &musterv1.NodeLoss{Node: "b", Signal: musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, SilentMs: 5000}}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := c.Renew(context.Background(), &musterv1.RenewRequest{Session: agents[1].session}); err != nil {
			t.Fatal(err)
		}
		if st := jobState(t, c, job); st != musterv1.JobState_JOB_STATE_RUNNING {
			t.Fatalf("job %s while b renews its lease", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A node lost without certainty keeps its job's next round from forming
// until its workers are certainly gone: its last renewal plus the fence
// bound. The restart says when that is.
func TestNextRoundWaitsForTheFence(t *testing.T) {
	t.Parallel()
	const fence = 400 * time.Millisecond
	s, c, agents, job := leaseCluster(t, fence, -1)
	renewed := time.Now() // the store's renewal is no earlier
	if _, err := c.Renew(context.Background(), &musterv1.RenewRequest{Session: agents[1].session}); err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, c, job)
	s.Store().SetLiveness("b", rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 5 * time.Second})
	restart := nextEvent(t, evs, "restart", func(ev *musterv1.JobEvent) bool { return ev.GetRestarting() != nil }).GetRestarting()
	if !strings.Contains(restart.GetReason(), "its workers are certain to be gone by") {
		t.Fatalf("restart reason %q does not say when b's workers are gone", restart.GetReason())
	}
	stopsOf(t, agents[0])
	if err := agents[0].publish(exited(job, 0, 0, 15, true)); err != nil {
		t.Fatal(err)
	}
	reservePorts(t, c, agents[0], 1002, 1003)
	if waited := time.Since(renewed); waited < fence {
		t.Fatalf("the next round formed %s after b's last renewal, before the fence of %s", waited, fence)
	}
}

// The store finds a lost node itself, within the node timeout: when its
// agent renews no lease, it asks the job's other nodes to probe it, and their
// word that they cannot reach it either makes it a loss.
func TestSilentNodeProbedByPeers(t *testing.T) {
	t.Parallel()
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) {
		c.NodeTimeout, c.RenewSilence, c.FenceAfter = 300*time.Millisecond, 300*time.Millisecond, time.Nanosecond
	})
	c := rendezvoustest.NewClient(t, s, security.Security{})
	var agents []*testAgent
	for i, name := range []string{"a", "b", "c", "d"} {
		s.Store().SetLiveness(name, rendezvous.Liveness{State: rendezvous.GossipAlive, Addr: "10.0.0." + string(rune('1'+i)) + ":7946"})
		agents = append(agents, newTestAgent(t, c, name, "10.0.0."+string(rune('1'+i)), int32(i), 0))
	}
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
		Nnodes: 2, Nproc: 1, KillTimeoutMs: 100}})
	if err != nil {
		t.Fatal(err)
	}
	reservePorts(t, c, agents[0], 1000, 1001)
	startsOf(t, agents[0], agents[1])
	// a, c and d renew their leases; b goes silent.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			for _, a := range []*testAgent{agents[0], agents[2], agents[3]} {
				c.Renew(ctx, &musterv1.RenewRequest{Session: a.session})
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	probe := agents[0].next().GetProbePeer()
	if probe.GetNode() != "b" || probe.GetAddr() != "10.0.0.2:7946" {
		t.Fatalf("a asked to probe %v, want b at 10.0.0.2:7946", probe)
	}
	if st := jobState(t, c, sub.JobId); st != musterv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("job %s before any peer said it cannot reach b", st)
	}
	// Three peers were asked: one that cannot reach b is not enough (its
	// probe crosses b's link, which may only be lossy); two are.
	report := func(a *testAgent) {
		if _, err := c.ReportLoss(ctx, &musterv1.ReportLossRequest{Session: a.session, Loss: &musterv1.NodeLoss{
			Node: "b", Signal: musterv1.LossSignal_LOSS_SIGNAL_SILENT, Detail: "no TCP answer from its gossip port"}}); err != nil {
			t.Fatal(err)
		}
	}
	report(agents[0])
	for _, a := range agents[2:] {
		if p := a.next().GetProbePeer(); p.GetNode() != "b" {
			t.Fatalf("asked to probe %v", p)
		}
	}
	if st := jobState(t, c, sub.JobId); st != musterv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("job %s after one peer of three could not reach b", st)
	}
	report(agents[2])
	reason := stopsOf(t, agents[0])
	if !strings.Contains(reason, "node b lost: nothing from its agent for") || !strings.Contains(reason, "confirmed by node a, node c") {
		t.Fatalf("stop reason %q", reason)
	}
}

// The node whose agent shares the store's process sees what the store
// sees: its word that others are lost confirms nothing when the store,
// having lost most of its nodes at once, suspects itself.
func TestOwnNodeConfirmsNothing(t *testing.T) {
	t.Parallel()
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) {
		c.FenceAfter, c.RenewSilence, c.OwnNode = time.Hour, time.Nanosecond, "a"
	})
	c := rendezvoustest.NewClient(t, s, security.Security{})
	var agents []*testAgent
	for i, name := range []string{"a", "b", "c", "d"} {
		agents = append(agents, newTestAgent(t, c, name, "10.0.0."+string(rune('1'+i)), int32(i), 0))
	}
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
		Nnodes: 2, Nproc: 1, KillTimeoutMs: 100}})
	if err != nil {
		t.Fatal(err)
	}
	reservePorts(t, c, agents[0], 1000, 1001)
	startsOf(t, agents[0], agents[1])
	for _, name := range []string{"b", "c", "d"} {
		s.Store().SetLiveness(name, rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 5 * time.Second})
	}
	if _, err := c.ReportLoss(context.Background(), &musterv1.ReportLossRequest{Session: agents[0].session,
		Loss: &musterv1.NodeLoss{Node: "b", Signal: musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, SilentMs: 5000}}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if st := jobState(t, c, sub.JobId); st != musterv1.JobState_JOB_STATE_RUNNING {
			t.Fatalf("job %s on the word of the store's own node", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A store that was cut off from most of its nodes counts a node's silence
// only from when it reaches most of them again: a node whose connection is
// still in TCP's backoff then gets the renewal silence to come back.
func TestSilenceCountsFromTheStoresReturn(t *testing.T) {
	t.Parallel()
	const silence = time.Second
	for _, tt := range []struct {
		name   string
		renews bool
	}{
		{"back within the silence", true},
		{"silent past it", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, c, agents, job := leaseCluster(t, time.Hour, silence)
			for _, name := range []string{"b", "c", "d"} {
				s.Store().SetLiveness(name, rendezvous.Liveness{State: rendezvous.GossipDead, Silent: 5 * time.Second})
			}
			time.Sleep(silence + 200*time.Millisecond) // everyone silent: the store suspects itself
			back := time.Now()
			// a, c and d renew from now on, as live agents do.
			ctx, cancel := context.WithCancel(context.Background())
			renewing := make(chan struct{})
			t.Cleanup(func() { cancel(); <-renewing })
			renew := func() {
				for _, a := range []*testAgent{agents[0], agents[2], agents[3]} {
					c.Renew(ctx, &musterv1.RenewRequest{Session: a.session})
				}
			}
			renew()
			go func() {
				defer close(renewing)
				tick := time.NewTicker(silence / 5)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
						renew()
					}
				}
			}()
			for _, name := range []string{"c", "d"} {
				s.Store().SetLiveness(name, rendezvous.Liveness{State: rendezvous.GossipAlive})
			}
			// b, silent longer than the renewal silence, is not lost at once.
			for time.Since(back) < silence/2 {
				if st := jobState(t, c, job); st != musterv1.JobState_JOB_STATE_RUNNING {
					t.Fatalf("job %s %s after the store reached its nodes again", st, time.Since(back))
				}
				time.Sleep(50 * time.Millisecond)
			}
			if tt.renews {
				if _, err := c.Renew(context.Background(), &musterv1.RenewRequest{Session: agents[1].session}); err != nil {
					t.Fatal(err)
				}
				s.Store().SetLiveness("b", rendezvous.Liveness{State: rendezvous.GossipAlive})
				for range 10 {
					if st := jobState(t, c, job); st != musterv1.JobState_JOB_STATE_RUNNING {
						t.Fatalf("job %s after b renewed", st)
					}
					time.Sleep(100 * time.Millisecond)
				}
				return
			}
			if reason := stopsOf(t, agents[0]); !strings.Contains(reason, "node b lost") {
				t.Fatalf("stop reason %q, want node b lost", reason)
			}
			if waited := time.Since(back); waited < silence {
				t.Fatalf("b lost %s after the store's return, before the renewal silence %s", waited, silence)
			}
		})
	}
}

// nextWithin is a's next command, failing the test if none comes within d:
// a round held back longer than that is held for the wrong reason.
func nextWithin(t *testing.T, a *testAgent, d time.Duration, what string) *musterv1.AgentCommand {
	t.Helper()
	got := make(chan *musterv1.AgentCommand, 1)
	go func() {
		if cmd, err := a.cmds.Recv(); err == nil {
			got <- cmd
		}
	}()
	select {
	case cmd := <-got:
		return cmd
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
		return nil
	}
}

// leavingJob runs a job of two nodes of nproc workers on three agents, with
// an hour's kill timeout, and has node b leave; it returns the client, the
// agents, the job and its events.
func leavingJob(t *testing.T, nproc int32) (*storeclient.Client, []*testAgent, string, <-chan *musterv1.JobEvent) {
	t.Helper()
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	var agents []*testAgent
	for i, name := range []string{"a", "b", "c"} {
		agents = append(agents, newTestAgent(t, c, name, "10.0.0."+string(rune('1'+i)), int32(i), 0))
	}
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"),
		Nnodes: 2, Nproc: nproc, MaxRestarts: 1, WaitTimeoutMs: 60_000, KillTimeoutMs: time.Hour.Milliseconds()}})
	if err != nil {
		t.Fatal(err)
	}
	reservePorts(t, c, agents[0], 1000, 1001)
	startsOf(t, agents[0], agents[1])
	evs := watchEvents(t, c, sub.JobId)
	if _, err := c.Leave(context.Background(), &musterv1.LeaveRequest{Session: agents[1].session, Reason: "SIGTERM"}); err != nil {
		t.Fatal(err)
	}
	return c, agents, sub.GetJobId(), evs
}

// A node that leaves gracefully costs its job a restart, and no more: once
// its workers' exits are delivered, they are certainly gone, and the next
// round forms at once, not after the kill timeout (an hour here) that
// bounds a lost agent's workers.
func TestNextRoundAfterALeaveWaitsOnlyForTheExits(t *testing.T) {
	t.Parallel()
	_, agents, job, evs := leavingJob(t, 2)
	nextEvent(t, evs, "node_lost", func(ev *musterv1.JobEvent) bool { return ev.GetNodeLost() != nil })
	stopsOf(t, agents[0], agents[1])
	for _, ex := range []struct {
		a    *testAgent
		rank int32
	}{{agents[1], 2}, {agents[1], 3}, {agents[0], 0}, {agents[0], 1}} {
		if err := ex.a.publish(exited(job, ex.rank, 0, 15, true)); err != nil {
			t.Fatal(err)
		}
	}
	if res := nextWithin(t, agents[0], 20*time.Second, "request for the next round's ports").GetReservePorts(); res == nil || !strings.HasSuffix(res.GetRoundId(), "-r1") {
		t.Fatalf("node rank 0 got %v, want the ports of round 1", res)
	}
}

// An agent that said it leaves and then went before its workers' exits
// reached the store leaves only the fence to go by: the next round waits
// for it and says so, and the node's loss is told once.
func TestLeftNodeGoneBeforeItsExitsHoldsTheRound(t *testing.T) {
	t.Parallel()
	_, agents, job, evs := leavingJob(t, 1)
	stopsOf(t, agents[0], agents[1])
	agents[1].cancel() // its agent goes, its workers' exits unsent
	if err := agents[0].publish(exited(job, 0, 0, 15, true)); err != nil {
		t.Fatal(err)
	}
	var lost int
	w := nextEvent(t, evs, "held progress", func(ev *musterv1.JobEvent) bool {
		if ev.GetNodeLost() != nil {
			lost++
		}
		return ev.GetWaiting().GetHeld() != ""
	}).GetWaiting()
	if lost != 1 {
		t.Errorf("node b's loss told %d times, want once", lost)
	}
	if want := "node b's workers to be certainly gone: it left the cluster (watch stream ended)"; w.GetHeld() != want ||
		time.Until(time.UnixMilli(w.GetHeldUntilUnixMs())) < 50*time.Minute {
		t.Fatalf("held for %q until %v; want %q, the kill timeout from now", w.GetHeld(), time.UnixMilli(w.GetHeldUntilUnixMs()), want)
	}
}
