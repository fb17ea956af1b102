package rendezvous_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/jobhistory"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/testfixture"
)

// A store that starts again on the same data directory lists the jobs the
// last one finished, with their ends, to whom it did: a user sees their
// own, the operator all.
func TestJobHistoryOutlivesTheStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to serve other users")
	}
	data, sockets := t.TempDir(), testfixture.SharedDir(t)
	start := func(sock string) *storeserver.Server {
		return rendezvoustest.NewStore(t, func(c *storeserver.Config) {
			c.Socket, c.SocketUsers = filepath.Join(sockets, sock), true
			c.History = jobhistory.Config{Dir: data}
		})
	}
	ctx := context.Background()
	s := start("first.sock")
	op := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, op, "solo", "127.0.0.1", -1, 0)
	nobody := rendezvoustest.NewClientAs(t, filepath.Join(sockets, "first.sock"), 65534, 65534, nil)
	if _, err := nobody.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("false"), Nnodes: 1}}); err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	op.PortsReserved(ctx, &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.GetRoundId(), Ports: []int32{1000, 1001}})
	theirs := a.next().GetStart()
	failed := exited(theirs.JobId, 0, 3, 0, false)
	failed.GetExited().StderrTail = []string{"boom"}
	if err := a.publish(failed); err != nil {
		t.Fatal(err)
	}
	if cmd := a.next(); cmd.GetStop() == nil {
		t.Fatalf("after the failure: %v, want a stop", cmd)
	}
	mine := runningJob(t, op, a)
	if err := a.publish(exited(mine.JobId, 0, 0, 0, false)); err != nil {
		t.Fatal(err)
	}
	finalEvent(t, op, mine.JobId)
	finalEvent(t, op, theirs.JobId)
	s.Close()

	s = start("second.sock")
	op = rendezvoustest.NewClient(t, s, security.Security{})
	nobody = rendezvoustest.NewClientAs(t, filepath.Join(sockets, "second.sock"), 65534, 65534, nil)
	all, err := op.ListJobs(ctx, &musterv1.ListJobsRequest{})
	if err != nil || len(all.Jobs) != 2 {
		t.Fatalf("the operator lists %v, %v; want both jobs", all.GetJobs(), err)
	}
	// The list leaves the stderr tail to GetJob.
	listed := all.Jobs[slices.IndexFunc(all.Jobs, func(j *musterv1.JobStatus) bool { return j.JobId == theirs.JobId })]
	if f := listed.GetFailure(); f.GetExitCode() != 3 || len(f.GetStderrTail()) != 0 || len(listed.RoundNodes) != 0 {
		t.Errorf("the failed job listed: %v", listed)
	}
	if j, err := op.GetJob(ctx, &musterv1.GetJobRequest{JobId: theirs.JobId}); err != nil || strings.Join(j.GetFailure().GetStderrTail(), "|") != "boom" {
		t.Errorf("the failed job's stderr: %v, %v", j, err)
	}
	for _, tc := range []struct {
		job   string
		state musterv1.JobState
		code  int32
		text  string
	}{
		{theirs.JobId, musterv1.JobState_JOB_STATE_FAILED, 3, "rank 0 (node n, local rank 0) exited with code 3"},
		{mine.JobId, musterv1.JobState_JOB_STATE_SUCCEEDED, 0, ""},
	} {
		j, err := op.GetJob(ctx, &musterv1.GetJobRequest{JobId: tc.job})
		if err != nil {
			t.Fatal(err)
		}
		if j.State != tc.state || j.ExitCode != tc.code || j.Summary != tc.text || j.Rounds != 1 ||
			len(j.RoundNodes) != 1 || strings.Join(j.RoundNodes[0].Nodes, ",") != "solo" || strings.Join(j.Nodes, ",") != "solo" ||
			j.SubmittedUnixMs == 0 || j.StartedUnixMs < j.SubmittedUnixMs || j.EndedUnixMs < j.StartedUnixMs {
			t.Errorf("job %s after the restart: %v", tc.job, j)
		}
	}
	own, err := nobody.ListJobs(ctx, &musterv1.ListJobsRequest{})
	if err != nil || len(own.Jobs) != 1 || own.Jobs[0].JobId != theirs.JobId || own.Jobs[0].GetOwner().GetUid() != 65534 {
		t.Fatalf("a user lists %v, %v; want only their own job", own.GetJobs(), err)
	}
	if j, err := nobody.GetJob(ctx, &musterv1.GetJobRequest{JobId: theirs.JobId}); err != nil || j.ExitCode != 3 {
		t.Fatalf("a user's own job: %v, %v", j, err)
	}
	if _, err := nobody.GetJob(ctx, &musterv1.GetJobRequest{JobId: mine.JobId}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user read the operator's job: %v", err)
	}
	if _, err := op.GetJob(ctx, &musterv1.GetJobRequest{JobId: "j-000000000000"}); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown job: %v", err)
	}
}
