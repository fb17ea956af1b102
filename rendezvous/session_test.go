package rendezvous_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/testwait"
)

// keyedAgent registers with a node key and, optionally, a report of its jobs.
func keyedAgent(t *testing.T, c *storeclient.Client, name, key string, jobs ...*musterv1.RunningJob) (*testAgent, error) {
	t.Helper()
	resp, err := c.Register(context.Background(), &musterv1.RegisterRequest{
		Node: &musterv1.Node{Name: name, Addr: "127.0.0.1", Rank: -1}, NodeKey: key, Jobs: jobs})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := c.Watch(ctx, &musterv1.WatchRequest{Session: resp.Session})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	return &testAgent{t: t, c: c, session: resp.Session, cmds: w, cancel: cancel}, nil
}

func (a *testAgent) publishSeq(first uint64, evs ...*musterv1.JobEvent) (uint64, error) {
	resp, err := a.c.Publish(context.Background(), &musterv1.PublishRequest{Session: a.session, FirstSeq: first, Events: evs})
	return resp.GetAckedSeq(), err
}

// startedJob submits a job of nproc workers on a and returns its assignment.
func startedJob(t *testing.T, c *storeclient.Client, a *testAgent, nproc int32) *musterv1.Assignment {
	t.Helper()
	if _, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: byteStrings("x"), Nnodes: 1, Nproc: nproc, KillTimeoutMs: 100}}); err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	if _, err := c.PortsReserved(context.Background(), &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.GetRoundId(), Ports: []int32{1000, 1001}}); err != nil {
		t.Fatal(err)
	}
	return a.next().GetStart()
}

func TestBatchWithABadEventIsNotApplied(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a, _ := keyedAgent(t, c, "a", "k")
	asg := startedJob(t, c, a, 2)
	// Rank 0's exit, then an event for a rank this node does not run.
	err := a.publish(exited(asg.JobId, 0, 0, 0, false), exited(asg.JobId, 7, 0, 0, false))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad batch: %v, want InvalidArgument", err)
	}
	// Had rank 0's exit been applied, rank 1's would end the job.
	if err := a.publish(exited(asg.JobId, 1, 0, 0, false)); err != nil {
		t.Fatal(err)
	}
	for _, j := range s.Store().Jobs() {
		if j.JobId == asg.JobId && j.State != musterv1.JobState_JOB_STATE_RUNNING {
			t.Fatalf("job %v after one of two exits: half of the refused batch was applied", j.State)
		}
	}
	if err := a.publish(exited(asg.JobId, 0, 0, 0, false)); err != nil {
		t.Fatal(err)
	}
	if fin := finalEvent(t, c, asg.JobId); fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("final: %v", fin)
	}
}

func TestNumberedEventsApplyOnce(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a, _ := keyedAgent(t, c, "a", "k")
	asg := startedJob(t, c, a, 2)
	out := &musterv1.JobEvent{JobId: asg.JobId, Event: &musterv1.JobEvent_Output{Output: &musterv1.Output{Rank: 0, Data: []byte("hi\n")}}}
	// The same batch twice, as after an answer lost on the way back.
	for range 2 {
		if acked, err := a.publishSeq(1, out, exited(asg.JobId, 0, 3, 0, false)); err != nil || acked != 2 {
			t.Fatalf("publish: acked %d, %v", acked, err)
		}
	}
	// An overlapping batch applies only what is new.
	if acked, err := a.publishSeq(2, exited(asg.JobId, 0, 3, 0, false), exited(asg.JobId, 1, 0, 0, true)); err != nil || acked != 3 {
		t.Fatalf("publish: acked %d, %v", acked, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: asg.JobId})
	if err != nil {
		t.Fatal(err)
	}
	outputs, exits := 0, 0
	for {
		ev, err := w.Recv()
		if err != nil {
			break
		}
		if ev.GetOutput() != nil {
			outputs++
		}
		if ev.GetExited() != nil {
			exits++
		}
		if f := ev.GetFinished(); f != nil && f.ExitCode != 3 {
			t.Fatalf("final: %v", f)
		}
	}
	if outputs != 1 || exits != 2 {
		t.Fatalf("%d outputs and %d exits in the job's events, want 1 and 2", outputs, exits)
	}
}

func TestNodeComesBackWithItsJobs(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a, _ := keyedAgent(t, c, "a", "secret-a")
	asg := startedJob(t, c, a, 1)
	a.cancel() // the connection breaks
	testwait.Until(t, 10*time.Second, "the store to see the node's stream end", func() bool {
		return s.Store().Stats().Nodes[rendezvous.NodeDisconnected] == 1
	})
	report := &musterv1.RunningJob{JobId: asg.JobId, RoundId: asg.RoundId, Spec: asg.Spec, NodeRank: 0, Nnodes: 1,
		Nproc: 1, WorldSize: 1, JobToken: asg.JobToken, Ranks: []*musterv1.RankState{{Rank: 0}}}
	// Another agent may not take the node, nor its jobs.
	if _, err := keyedAgent(t, c, "a", "other", report); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another agent's registration: %v", err)
	}
	if _, err := keyedAgent(t, c, "a", ""); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a registration without the key: %v", err)
	}
	b, err := keyedAgent(t, c, "a", "secret-a", report)
	if err != nil {
		t.Fatal(err)
	}
	if b.session != a.session {
		t.Fatalf("session %s, then %s", a.session, b.session)
	}
	if err := b.publish(exited(asg.JobId, 0, 4, 0, false)); err != nil {
		t.Fatal(err)
	}
	if fin := finalEvent(t, c, asg.JobId); fin.ExitCode != 4 || fin.State != musterv1.JobState_JOB_STATE_FAILED {
		t.Fatalf("final: %v", fin)
	}
}

func TestNodeThatDoesNotComeBackFailsItsJob(t *testing.T) {
	t.Parallel()
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.SessionGrace = 200 * time.Millisecond })
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a, _ := keyedAgent(t, c, "a", "k")
	asg := startedJob(t, c, a, 1)
	a.cancel()
	fin := finalEvent(t, c, asg.JobId)
	if fin.State != musterv1.JobState_JOB_STATE_FAILED || !strings.Contains(fin.Summary, "did not come back within 200ms") {
		t.Fatalf("final: %v", fin)
	}
}

func TestRestartedStoreTakesJobsOverFromAgents(t *testing.T) {
	old := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, old, security.Security{})
	a, _ := keyedAgent(t, c, "a", "ka")
	b, _ := keyedAgent(t, c, "b", "kb")
	if _, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: byteStrings("x"), Nnodes: 2, Nproc: 2, KillTimeoutMs: 100}}); err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	if _, err := c.PortsReserved(context.Background(), &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.GetRoundId(), Ports: []int32{1000, 1001}}); err != nil {
		t.Fatal(err)
	}
	asgA, asgB := a.next().GetStart(), b.next().GetStart()
	// Rank 3 exits and the old store acknowledges it; then the store goes.
	if _, err := b.publishSeq(1, exited(asgB.JobId, 3, 0, 0, false)); err != nil {
		t.Fatal(err)
	}
	addr := old.Addr()
	old.Close()

	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.ListenAddr = addr })
	c2 := rendezvoustest.NewClient(t, s, security.Security{})
	report := func(asg *musterv1.Assignment, ranks ...*musterv1.RankState) *musterv1.RunningJob {
		return &musterv1.RunningJob{JobId: asg.JobId, RoundId: asg.RoundId, Spec: asg.Spec, NodeRank: asg.NodeRank,
			Nnodes: 2, Nproc: 2, WorldSize: 4, JobToken: asg.JobToken, Ranks: ranks, StoreId: "st-old"}
	}
	b2, err := keyedAgent(t, c2, "b", "kb", report(asgB, &musterv1.RankState{Rank: 2},
		&musterv1.RankState{Rank: 3, Exited: &musterv1.WorkerExited{Rank: 3}, Acked: true}))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := keyedAgent(t, c2, "a", "ka", report(asgA, &musterv1.RankState{Rank: 0}, &musterv1.RankState{Rank: 1}))
	if err != nil {
		t.Fatal(err)
	}
	// The job's credential still opens its KV.
	wc := rendezvoustest.NewClient(t, s, security.Security{JobToken: asgA.JobToken})
	if _, err := wc.KVSet(context.Background(), &musterv1.KVSetRequest{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatalf("job credential after the restart: %v", err)
	}
	// A follower of the old store is told, then reads from the start.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := c2.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: asgA.JobId, FromVersion: 40, StoreId: "st-old", Attach: true})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Recv(); err != nil || ev.GetRestarted() == nil {
		t.Fatalf("first event %v, %v; want StoreRestarted", ev, err)
	}
	for _, p := range []struct {
		a    *testAgent
		rank int32
		code int32
	}{{a2, 0, 0}, {a2, 1, 6}, {b2, 2, 0}} {
		if err := p.a.publish(exited(asgA.JobId, p.rank, p.code, 0, false)); err != nil {
			t.Fatalf("rank %d: %v", p.rank, err)
		}
	}
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("stream ended before the job: %v", err)
		}
		if f := ev.GetFinished(); f != nil {
			if f.ExitCode != 6 || f.Failure.GetRank() != 1 {
				t.Fatalf("final: %v", f)
			}
			return
		}
	}
}
