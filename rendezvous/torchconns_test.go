package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/storewire"
	"github.com/musterhq/muster/testwait"
)

// torchJob runs a job on a (node rank 0, 10.0.0.1) and b (10.0.0.2) while
// c (10.0.0.3) is registered too, and returns the job's round.
func torchJob(t *testing.T, c *storeclient.Client) (a, b, other *testAgent, job, round string) {
	t.Helper()
	a = newTestAgent(t, c, "a", "10.0.0.1", 0, 0)
	b = newTestAgent(t, c, "b", "10.0.0.2", 1, 0)
	other = newTestAgent(t, c, "c", "10.0.0.3", -1, 0)
	resp, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: byteStrings("train"), Nnodes: 2, Nproc: 1, KillTimeoutMs: 100}})
	if err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	if _, err := c.PortsReserved(context.Background(), &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.GetRoundId(),
		Ports: []int32{29500, 29501}[:res.GetCount()]}); err != nil {
		t.Fatal(err)
	}
	if sa, sb := a.next().GetStart(), b.next().GetStart(); sa.GetNodeRank() != 0 || sb.GetNodeRank() != 1 {
		t.Fatalf("node ranks: a %d, b %d", sa.GetNodeRank(), sb.GetNodeRank())
	}
	return a, b, other, resp.GetJobId(), res.GetRoundId()
}

func conn(client string) *musterv1.TorchConn {
	return &musterv1.TorchConn{Client: client, Server: "10.0.0.1:29500"}
}

// The agent serving a job's TCPStore asks who made its connections from
// the job's other nodes: the store asks those nodes' agents only, about
// their own connections, and relays each verdict; an address that is no
// other node's of the round is refused without asking anyone.
func TestCheckTorchConnsAsksTheClientsNode(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a, b, _, job, round := torchJob(t, c)
	type result struct {
		resp *musterv1.CheckTorchConnsResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.CheckTorchConns(context.Background(), &musterv1.CheckTorchConnsRequest{Session: a.session, JobId: job, RoundId: round,
			Conns: []*musterv1.TorchConn{conn("10.0.0.2:40000"), conn("10.0.0.3:40000"), conn("10.0.0.2:40001"), conn("10.0.0.9:40000")}})
		done <- result{resp, err}
	}()
	q := b.next().GetCheckTorchConns()
	if q.GetJobId() != job || len(q.GetConns()) != 2 || q.GetConns()[0].GetClient() != "10.0.0.2:40000" || q.GetConns()[1].GetClient() != "10.0.0.2:40001" {
		t.Fatalf("node b was asked %v", q)
	}
	// Only the node asked may answer, with a verdict for each connection.
	answer := func(session string, verdicts ...*musterv1.TorchConnVerdict) error {
		_, err := c.TorchConnsChecked(context.Background(), &musterv1.TorchConnsCheckedRequest{Session: session, RequestId: q.GetRequestId(), Verdicts: verdicts})
		return err
	}
	if err := answer(a.session, &musterv1.TorchConnVerdict{Allowed: true}, &musterv1.TorchConnVerdict{Allowed: true}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an answer from a node not asked: %v", err)
	}
	if err := answer(b.session, &musterv1.TorchConnVerdict{Allowed: true}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("one verdict for two connections: %v", err)
	}
	if err := answer(b.session, &musterv1.TorchConnVerdict{Reason: strings.Repeat("x", 300)}, &musterv1.TorchConnVerdict{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a reason of 300 bytes: %v", err)
	}
	if err := answer(b.session, &musterv1.TorchConnVerdict{Allowed: true}, &musterv1.TorchConnVerdict{Reason: "a process of uid 65534"}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := []struct {
		allowed bool
		reason  string
	}{
		{true, ""},
		{false, "10.0.0.3 is no other node's address"},
		{false, "node b: a process of uid 65534"},
		{false, "10.0.0.9 is no other node's address"},
	}
	if len(r.resp.GetVerdicts()) != len(want) {
		t.Fatalf("verdicts %v", r.resp.GetVerdicts())
	}
	for i, v := range r.resp.GetVerdicts() {
		if v.GetAllowed() != want[i].allowed || !strings.Contains(v.GetReason(), want[i].reason) {
			t.Errorf("connection %d: %v, want allowed %v, %q", i, v, want[i].allowed, want[i].reason)
		}
	}
	if err := answer(b.session, &musterv1.TorchConnVerdict{Allowed: true}, &musterv1.TorchConnVerdict{Allowed: true}); status.Code(err) != codes.NotFound {
		t.Fatalf("a second answer: %v", err)
	}
}

// Only the node that serves the job's TCPStore in its current round asks,
// about a bounded number of well-formed connections; a node that does not
// answer holds the question no longer than the asker waits.
func TestCheckTorchConnsRefusals(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a, b, other, job, round := torchJob(t, c)
	ask := func(ctx context.Context, session, job, round string, conns ...*musterv1.TorchConn) error {
		_, err := c.CheckTorchConns(ctx, &musterv1.CheckTorchConnsRequest{Session: session, JobId: job, RoundId: round, Conns: conns})
		return err
	}
	ctx := context.Background()
	many := make([]*musterv1.TorchConn, storewire.MaxTorchConns+1)
	for i := range many {
		many[i] = conn("10.0.0.2:40000")
	}
	for _, tt := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"node rank 1", ask(ctx, b.session, job, round, conn("10.0.0.1:40000")), codes.FailedPrecondition},
		{"a node outside the job", ask(ctx, other.session, job, round, conn("10.0.0.2:40000")), codes.FailedPrecondition},
		{"another round", ask(ctx, a.session, job, round+"x", conn("10.0.0.2:40000")), codes.FailedPrecondition},
		{"another job", ask(ctx, a.session, "j-nosuchjob", round, conn("10.0.0.2:40000")), codes.NotFound},
		{"no session", ask(ctx, "nosuchsession", job, round, conn("10.0.0.2:40000")), codes.Unavailable},
		{"no connection", ask(ctx, a.session, job, round), codes.InvalidArgument},
		{"too many", ask(ctx, a.session, job, round, many...), codes.InvalidArgument},
		{"not an address", ask(ctx, a.session, job, round, conn("b:40000")), codes.InvalidArgument},
	} {
		if got := status.Code(tt.err); got != tt.want {
			t.Errorf("%s: %v, want %s", tt.name, tt.err, tt.want)
		}
	}
	// b never answers: the asker's deadline ends the question.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := ask(short, a.session, job, round, conn("10.0.0.2:40000")); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("unanswered: %v", err)
	}
	if q := b.next().GetCheckTorchConns(); q == nil {
		t.Fatal("b was not asked")
	}
}

// A node whose agent is not connected cannot say who made a connection
// now: the asker is told to ask again, not that the connection is refused.
func TestCheckTorchConnsOfANodeAway(t *testing.T) {
	s := rendezvoustest.NewStore(t, func(cfg *storeserver.Config) { cfg.SessionGrace = time.Minute })
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a, b, _, job, round := torchJob(t, c)
	b.cancel()
	var err error
	testwait.UntilShowing(t, 10*time.Second, "the store to say node b is away", func() bool {
		_, err = c.CheckTorchConns(context.Background(), &musterv1.CheckTorchConnsRequest{Session: a.session, JobId: job, RoundId: round,
			Conns: []*musterv1.TorchConn{conn("10.0.0.2:40000")}})
		return status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "node b is not connected to the store")
	}, func() string { return fmt.Sprint(err) })
}

// A restarted store that has yet to hear from one of a job's nodes cannot
// tell whose address a connection comes from: the asker is told to ask
// again; once the node is back, it is asked.
func TestCheckTorchConnsAfterTheStoreRestarted(t *testing.T) {
	old := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, old, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.1", 0, 0)
	b := newTestAgent(t, c, "b", "10.0.0.2", 1, 0)
	if _, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: byteStrings("train"), Nnodes: 2, Nproc: 1, KillTimeoutMs: 100}}); err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	if _, err := c.PortsReserved(context.Background(), &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.GetRoundId(),
		Ports: []int32{29500, 29501}[:res.GetCount()]}); err != nil {
		t.Fatal(err)
	}
	asgA, asgB := a.next().GetStart(), b.next().GetStart()
	addr := old.Addr()
	old.Close()

	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.ListenAddr = addr })
	c2 := rendezvoustest.NewClient(t, s, security.Security{})
	report := func(asg *musterv1.Assignment) []*musterv1.RunningJob {
		return []*musterv1.RunningJob{{JobId: asg.JobId, RoundId: asg.RoundId, Spec: asg.Spec, NodeRank: asg.NodeRank,
			Nnodes: 2, Nproc: 1, WorldSize: 2, JobToken: asg.JobToken, StoreId: "st-old"}}
	}
	a2 := registerTestAgent(t, c2, &musterv1.RegisterRequest{Node: &musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: 0}, Jobs: report(asgA)})
	ask := func() (*musterv1.CheckTorchConnsResponse, error) {
		return c2.CheckTorchConns(context.Background(), &musterv1.CheckTorchConnsRequest{Session: a2.session, JobId: asgA.JobId,
			RoundId: asgA.RoundId, Conns: []*musterv1.TorchConn{conn("10.0.0.2:40000")}})
	}
	if _, err := ask(); status.Code(err) != codes.Unavailable {
		t.Fatalf("node b not back yet: %v", err)
	}
	b2 := registerTestAgent(t, c2, &musterv1.RegisterRequest{Node: &musterv1.Node{Name: "b", Addr: "10.0.0.2", Rank: 1}, Jobs: report(asgB)})
	done := make(chan error, 1)
	go func() {
		resp, err := ask()
		if err == nil && !resp.GetVerdicts()[0].GetAllowed() {
			err = errors.New(resp.GetVerdicts()[0].GetReason())
		}
		done <- err
	}()
	q := b2.next().GetCheckTorchConns()
	if _, err := c2.TorchConnsChecked(context.Background(), &musterv1.TorchConnsCheckedRequest{Session: b2.session, RequestId: q.GetRequestId(),
		Verdicts: []*musterv1.TorchConnVerdict{{Allowed: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("node b back: %v", err)
	}
}
