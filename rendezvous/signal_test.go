package rendezvous_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
)

// A job's owner sends a signal to its running workers through their
// nodes' agents; a job credential cannot, nor can a signal muster does not
// forward be sent; a request within the coalescing window of the last one
// is the same delivery.
func TestSignalReachesTheRoundsNodes(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	op := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, op, "solo", "127.0.0.1", -1, 0)
	asg := runningJob(t, op, a)
	ctx := context.Background()

	res, err := op.Signal(ctx, &musterv1.SignalRequest{JobId: asg.JobId, Signal: 10, CoalesceMs: 60_000})
	if err != nil || res.GetNodes() != 1 || res.GetCoalesced() {
		t.Fatalf("signal: %v, %v; want 1 node", res, err)
	}
	if sj := a.next().GetSignal(); sj.GetJobId() != asg.JobId || sj.GetSignal() != 10 {
		t.Fatalf("agent got %v, want SIGUSR1 for %s", sj, asg.JobId)
	}
	// The same signal again within the window is the same delivery; another
	// signal is not.
	if res, err := op.Signal(ctx, &musterv1.SignalRequest{JobId: asg.JobId, Signal: 10, CoalesceMs: 60_000}); err != nil || !res.GetCoalesced() {
		t.Fatalf("second SIGUSR1: %v, %v; want it coalesced", res, err)
	}
	if _, err := op.Signal(ctx, &musterv1.SignalRequest{JobId: asg.JobId, Signal: 12, CoalesceMs: 60_000}); err != nil {
		t.Fatal(err)
	}
	if sj := a.next().GetSignal(); sj.GetSignal() != 12 {
		t.Fatalf("agent got %v, want SIGUSR2", sj)
	}
	for _, tc := range []struct {
		req  *musterv1.SignalRequest
		code codes.Code
	}{
		{&musterv1.SignalRequest{JobId: asg.JobId, Signal: 9}, codes.FailedPrecondition},
		{&musterv1.SignalRequest{JobId: asg.JobId, Signal: 20}, codes.FailedPrecondition},
		{&musterv1.SignalRequest{JobId: asg.JobId, Signal: 10, CoalesceMs: -1}, codes.FailedPrecondition},
		{&musterv1.SignalRequest{JobId: "j-none", Signal: 10}, codes.NotFound},
	} {
		if _, err := op.Signal(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("%v: %v, want %s", tc.req, err, tc.code)
		}
	}
	worker := rendezvoustest.NewClient(t, s, security.Security{JobToken: asg.JobToken})
	if _, err := worker.Signal(ctx, &musterv1.SignalRequest{JobId: asg.JobId, Signal: 10}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a job credential signalled the job: %v", err)
	}
	// Once the job ended there is nobody to signal.
	a.publish(exited(asg.JobId, 0, 0, 0, false))
	finalEvent(t, op, asg.JobId)
	if _, err := op.Signal(ctx, &musterv1.SignalRequest{JobId: asg.JobId, Signal: 10}); err == nil || !strings.Contains(err.Error(), "no running workers") {
		t.Fatalf("signal to an ended job: %v", err)
	}
}

// A hung worker's report names the ranks that were waiting for it (still
// running, not hung with it); its job's other nodes dump their flight
// recorders before they stop; and an agent may not name waiting ranks.
func TestHungWorkerNamesWaitingRanks(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	op := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, op, "solo", "127.0.0.1", -1, 0)
	ctx := context.Background()
	sub, err := op.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Nproc: 5, HangTimeoutMs: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	op.PortsReserved(ctx, &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.GetRoundId(), Ports: []int32{1000, 1001}})
	a.next() // the start
	job := sub.JobId

	bad := exited(job, 1, 0, 6, false)
	bad.GetExited().Hang = &musterv1.WorkerHang{SilentMs: 1200, TimeoutMs: 1000, Waiting: []int32{0}, WaitingCount: 1}
	if err := a.publish(bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an agent named the waiting ranks: %v", err)
	}
	if err := a.publish(exited(job, 3, 0, 0, false)); err != nil {
		t.Fatal(err)
	}
	hung := exited(job, 1, 0, 6, false)
	hung.GetExited().Hang = &musterv1.WorkerHang{SilentMs: 1200, TimeoutMs: 1000, AlsoHung: []int32{4}}
	if err := a.publish(hung); err != nil {
		t.Fatal(err)
	}
	if stop := a.next().GetStop(); stop.GetJobId() != job || !stop.GetDumpFirst() {
		t.Fatalf("stop %v, want one that dumps first", stop)
	}
	for _, r := range []int32{0, 2, 4} {
		a.publish(exited(job, r, 0, 15, true))
	}
	fin := finalEvent(t, op, job)
	h := fin.GetFailure().GetHang()
	if fin.GetExitCode() != 134 || !slices.Equal(h.GetWaiting(), []int32{0, 2}) || h.GetWaitingCount() != 2 {
		t.Fatalf("finished %v, want exit 134 with ranks 0 and 2 waiting", fin)
	}
	if want := "rank 1 (node n, local rank 0) hung: no heartbeat for 1.2 s (--hang-timeout 1s); rank 4 hung too; ranks 0, 2 were waiting"; fin.GetSummary() != want {
		t.Fatalf("summary %q, want %q", fin.GetSummary(), want)
	}
}
