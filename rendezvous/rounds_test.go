package rendezvous_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/musterhq/muster/progress"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// watchEvents follows a job's events in the background.
func watchEvents(t *testing.T, c *storeclient.Client, job string) <-chan *musterv1.JobEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: job})
	if err != nil {
		t.Fatal(err)
	}
	evs := make(chan *musterv1.JobEvent, 100)
	go func() {
		defer close(evs)
		for {
			ev, err := w.Recv()
			if err != nil {
				return
			}
			evs <- ev
		}
	}()
	return evs
}

// nextEvent returns the next event that want accepts.
func nextEvent(t *testing.T, evs <-chan *musterv1.JobEvent, what string, want func(*musterv1.JobEvent) bool) *musterv1.JobEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("job stream ended before %s", what)
			}
			if want(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s", what)
		}
	}
}

func nextWaiting(t *testing.T, evs <-chan *musterv1.JobEvent) *musterv1.WaitingForNodes {
	t.Helper()
	return nextEvent(t, evs, "progress", func(ev *musterv1.JobEvent) bool { return ev.GetWaiting() != nil }).GetWaiting()
}

func nextFinished(t *testing.T, evs <-chan *musterv1.JobEvent) *musterv1.JobFinished {
	t.Helper()
	return nextEvent(t, evs, "final event", func(ev *musterv1.JobEvent) bool { return ev.GetFinished() != nil }).GetFinished()
}

func reservePorts(t *testing.T, c *storeclient.Client, a *testAgent, ports ...int32) *musterv1.ReservePorts {
	t.Helper()
	res := a.next().GetReservePorts()
	if res == nil {
		t.Fatal("node rank 0 was not asked for ports")
	}
	if _, err := c.PortsReserved(context.Background(), &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.RoundId, Ports: ports}); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestRoundWaitsForNodesAndRanksThem(t *testing.T) {
	t.Parallel()
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.2", -1, 0)
	// Before rounds could wait, this Submit failed at once.
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: byteStrings("x"), Nnodes: 3, WaitTimeoutMs: 60_000}})
	if err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, c, sub.JobId)
	if w := nextWaiting(t, evs); progress.DescribeWaiting(w) != "1 of 3 ready (a); 2 missing" || w.TimeoutMs != 60_000 {
		t.Fatalf("first progress: %v", w)
	}
	b := newTestAgent(t, c, "b", "10.0.0.3", -1, 0)
	if w := nextWaiting(t, evs); progress.DescribeWaiting(w) != "2 of 3 ready (a, b); 1 missing" {
		t.Fatalf("second progress: %s", progress.DescribeWaiting(w))
	}
	// The last to come has an explicit node rank: it is node rank 0.
	z := newTestAgent(t, c, "z", "10.0.0.1", 0, 0)
	reservePorts(t, c, z, 29500, 29501)
	for want, ag := range []*testAgent{z, a, b} {
		if asg := ag.next().GetStart(); asg.GetNodeRank() != int32(want) || asg.GetMasterAddr() != "10.0.0.1" || asg.GetWorldSize() != 3 {
			t.Errorf("node %d: assignment %v", want, asg)
		}
	}
}

func TestRoundWaitTimesOut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes map[string]int // name -> GPUs
		spec  *musterv1.JobSpec
		want  string
	}{
		{"no node at all", nil, &musterv1.JobSpec{Nnodes: 2},
			"waited 100ms for nodes: 0 of 2 ready; 2 missing"},
		{"one of two", map[string]int{"a": 0}, &musterv1.JobSpec{Nnodes: 2},
			"waited 100ms for nodes: 1 of 2 ready (a); 1 missing"},
		{"too few GPUs", map[string]int{"a": 4, "g": 1}, &musterv1.JobSpec{Nnodes: 2, Gpus: 2},
			"waited 100ms for nodes: 1 of 2 ready (a); 1 missing; not usable: node g has 1 GPUs (0: Test GPU), 1 free"},
		{"a listed host never came", map[string]int{"a": 0, "b": 0}, &musterv1.JobSpec{Nnodes: 2, Hosts: []string{"a", "c"}},
			"waited 100ms for nodes: 1 of 2 ready (a); 1 missing; not usable: listed host c is not registered"},
		{"an excluded node", map[string]int{"a": 0, "b": 0}, &musterv1.JobSpec{Nnodes: 2, Exclude: []string{"b"}},
			"waited 100ms for nodes: 1 of 2 ready (a); 1 missing; not usable: node b is excluded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rendezvoustest.NewStore(t, nil)
			c := rendezvoustest.NewClient(t, s, security.Security{})
			for name, gpus := range tt.nodes {
				newTestAgent(t, c, name, "10.0.0.1", -1, gpus)
			}
			tt.spec.Argv, tt.spec.WaitTimeoutMs = byteStrings("x"), 100
			sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: tt.spec})
			if err != nil {
				t.Fatal(err)
			}
			fin := nextFinished(t, watchEvents(t, c, sub.JobId))
			if fin.State != musterv1.JobState_JOB_STATE_FAILED || fin.ExitCode != 1 || fin.Summary != tt.want {
				t.Fatalf("final: %v %d %q\nwant summary %q", fin.State, fin.ExitCode, fin.Summary, tt.want)
			}
		})
	}
}

func TestWaitingRoundTakesFreedGPUs(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	g := newTestAgent(t, c, "g", "10.0.0.1", -1, 2)
	ctx := context.Background()
	spec := func() *musterv1.JobSpec {
		return &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Gpus: 2, WaitTimeoutMs: 60_000}
	}
	first, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: spec()})
	if err != nil {
		t.Fatal(err)
	}
	r1 := reservePorts(t, c, g, 1000, 1001)
	g.next()
	second, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: spec()})
	if err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, c, second.JobId)
	if w := progress.DescribeWaiting(nextWaiting(t, evs)); w != "0 of 1 ready; 1 missing; not usable: node g has 2 GPUs (0: Test GPU, 1: Test GPU), 0 free" {
		t.Fatalf("progress: %s", w)
	}
	if err := g.publish(exited(first.JobId, 0, 0, 0, false), exited(first.JobId, 1, 0, 0, false)); err != nil {
		t.Fatal(err)
	}
	// The first job's end frees its GPUs: the second job's round forms.
	r2 := reservePorts(t, c, g, 1002, 1003)
	if asg := g.next().GetStart(); asg.GetJobId() != second.JobId || len(asg.GetGpus()) != 2 || r2.RoundId == r1.RoundId {
		t.Fatalf("second job's assignment %v (round %s after %s)", asg, r2.RoundId, r1.RoundId)
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	ctx := context.Background()
	sub, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, WaitTimeoutMs: 60_000}})
	if err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, c, sub.JobId)
	nextWaiting(t, evs)
	if _, err := s.Store().Restart(sub.JobId, "now"); err == nil {
		t.Fatal("a round waiting for nodes restarted")
	}
	if _, err := c.Cancel(ctx, &musterv1.CancelRequest{JobId: sub.JobId, ExitCode: 130, Reason: "stopped by SIGINT"}); err != nil {
		t.Fatal(err)
	}
	if fin := nextFinished(t, evs); fin.State != musterv1.JobState_JOB_STATE_CANCELLED || fin.ExitCode != 130 {
		t.Fatalf("final: %v", fin)
	}
	// A node that comes later gets no work from the cancelled job.
	a := newTestAgent(t, c, "late", "10.0.0.1", -1, 0)
	got := make(chan *musterv1.AgentCommand, 1)
	go func() {
		if cmd, err := a.cmds.Recv(); err == nil {
			got <- cmd
		}
	}()
	select {
	case cmd := <-got:
		t.Fatalf("a late node got %v", cmd)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestRestartIsANewRound(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.1", -1, 0)
	ctx := context.Background()
	sub, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Nproc: 2, KillTimeoutMs: 100}})
	if err != nil {
		t.Fatal(err)
	}
	// A restart before the ports came: the next round asks again, under a
	// new round ID, and the first request is void.
	stale := a.next().GetReservePorts()
	if next, err := s.Store().Restart(sub.JobId, "before the ports"); err != nil || next != 1 {
		t.Fatalf("restart while reserving: %d, %v", next, err)
	}
	r0 := reservePorts(t, c, a, 1000, 1001)
	if _, err := c.PortsReserved(ctx, &musterv1.PortsReservedRequest{Session: a.session, RoundId: stale.RoundId, Ports: []int32{1, 2}}); err == nil || r0.RoundId == stale.RoundId {
		t.Fatal("an ended round took ports")
	}
	first := a.next().GetStart()
	next, err := s.Store().Restart(sub.JobId, "a node joined")
	if err != nil || next != 2 {
		t.Fatalf("restart: %d, %v", next, err)
	}
	if st := a.next().GetStop(); st.GetReason() != "restarting: a node joined" || st.GetKillTimeoutMs() != 100 {
		t.Fatalf("stop: %v", st)
	}
	// Workers stopped for a restart fail nothing, even one that exits badly.
	if err := a.publish(exited(sub.JobId, 0, 0, 15, true), exited(sub.JobId, 1, 1, 0, false)); err != nil {
		t.Fatal(err)
	}
	r1 := reservePorts(t, c, a, 2000, 2001)
	second := a.next().GetStart()
	switch {
	case r1.RoundId == r0.RoundId || second.RoundId != r1.RoundId:
		t.Errorf("round IDs %s then %s (assignment %s)", r0.RoundId, r1.RoundId, second.RoundId)
	case bytes.Equal(first.NcclUniqueId, second.NcclUniqueId):
		t.Error("the new round kept the unique ID")
	case second.MasterPort != 2000 || second.NcclCommId != "10.0.0.1:2001":
		t.Errorf("new round's ports: %d, %s", second.MasterPort, second.NcclCommId)
	case first.RoundNumber != 1 || second.RoundNumber != 2 || second.JobId != sub.JobId:
		t.Errorf("round numbers %d, %d; job %s", first.RoundNumber, second.RoundNumber, second.JobId)
	case second.RestartCount != 0:
		// A restart asked for, as a node joining, is not a failure's.
		t.Errorf("restart count %d after restarts without a failure", second.RestartCount)
	}
	// The old round is gone: its ID no longer takes ports.
	if _, err := c.PortsReserved(ctx, &musterv1.PortsReservedRequest{Session: a.session, RoundId: r0.RoundId, Ports: []int32{1, 2}}); err == nil {
		t.Error("an ended round took ports")
	}
	a.publish(exited(sub.JobId, 0, 0, 0, false), exited(sub.JobId, 1, 0, 0, false))
	if fin := finalEvent(t, c, sub.JobId); fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("final: %v", fin)
	}
	if _, err := s.Store().Restart(sub.JobId, "late"); err == nil {
		t.Error("an ended job restarted")
	}
}

// TestAgentStore checks who serves a job's TCPStore: node rank 0's agent,
// asked with its ports and told to release it when the job ends, unless the
// job opted out.
func TestAgentStore(t *testing.T) {
	tests := []struct {
		name         string
		noAgentStore bool
	}{
		{"agent store", false},
		{"no agent store", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rendezvoustest.NewStore(t, nil)
			c := rendezvoustest.NewClient(t, s, security.Security{})
			a := newTestAgent(t, c, "a", "10.0.0.2", -1, 0)
			ctx := context.Background()
			spec := &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Nproc: 1, WaitTimeoutMs: 60_000, NoAgentStore: tt.noAgentStore}
			job, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: spec})
			if err != nil {
				t.Fatal(err)
			}
			res := reservePorts(t, c, a, 1000, 1001)
			if res.GetAgentStore() == tt.noAgentStore || res.GetJobId() != job.JobId {
				t.Fatalf("reserve ports %v for job %s", res, job.JobId)
			}
			if asg := a.next().GetStart(); asg.GetMasterPort() != 1000 {
				t.Fatalf("assignment %v", asg)
			}
			if err := a.publish(exited(job.JobId, 0, 0, 0, false)); err != nil {
				t.Fatal(err)
			}
			if fin := finalEvent(t, c, job.JobId); fin.GetExitCode() != 0 {
				t.Fatalf("job ended %v", fin)
			}
			// The next command is the release, or, without an agent store,
			// the next job's ports.
			next, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: spec})
			if err != nil {
				t.Fatal(err)
			}
			cmd := a.nextAny()
			if tt.noAgentStore {
				if cmd.GetReservePorts().GetJobId() != next.JobId {
					t.Fatalf("command %v, want the next job's ports", cmd)
				}
				return
			}
			if cmd.GetReleaseStore().GetJobId() != job.JobId {
				t.Fatalf("command %v, want the job's TCPStore released", cmd)
			}
		})
	}
}
