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

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/testfixture"
)

// runningJob submits a one-node job through op and plays agent a until the
// job runs; it returns a's assignment.
func runningJob(t *testing.T, op *storeclient.Client, a *testAgent) *musterv1.Assignment {
	t.Helper()
	ctx := context.Background()
	if _, err := op.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1}}); err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	if _, err := op.PortsReserved(ctx, &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.GetRoundId(), Ports: []int32{1000, 1001}}); err != nil {
		t.Fatal(err)
	}
	asg := a.next().GetStart()
	if asg == nil || asg.JobToken == "" || !strings.HasPrefix(asg.JobToken, asg.JobId+".") {
		t.Fatalf("assignment without a job credential: %v", asg)
	}
	return asg
}

func TestJobCredentialReachesOnlyItsJob(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	op := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, op, "solo", "127.0.0.1", -1, 0)
	jobA, jobB := runningJob(t, op, a), runningJob(t, op, a)
	ca := rendezvoustest.NewClient(t, s, security.Security{JobToken: jobA.JobToken})
	cb := rendezvoustest.NewClient(t, s, security.Security{JobToken: jobB.JobToken})
	ctx := context.Background()

	if _, err := ca.KVSet(ctx, &musterv1.KVSetRequest{Key: "secret", Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	// Job B names its own scope or none: it never sees A's key.
	if _, err := cb.KVGet(ctx, &musterv1.KVGetRequest{Key: "secret"}); status.Code(err) != codes.NotFound {
		t.Fatalf("job B read job A's key: %v", err)
	}
	// Naming another job's scope is refused, whatever the call.
	if _, err := cb.KVGet(ctx, &musterv1.KVGetRequest{Scope: jobA.JobId, Key: "secret"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("job B named job A's scope: %v", err)
	}
	if _, err := cb.KVSet(ctx, &musterv1.KVSetRequest{Scope: jobA.JobId, Key: "secret", Value: []byte("b")}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("job B wrote into job A's scope: %v", err)
	}
	if _, err := cb.Barrier(ctx, &musterv1.BarrierRequest{Scope: jobA.JobId, Name: "b", Count: 1, Participant: "0"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("job B joined job A's barrier: %v", err)
	}
	if v, err := ca.Get(ctx, "secret", false); err != nil || string(v) != "a" {
		t.Fatalf("job A's key: %q, %v", v, err)
	}
	// Even the cluster operator uses KV only through a job's credential.
	if _, err := op.KVGet(ctx, &musterv1.KVGetRequest{Scope: jobA.JobId, Key: "secret"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("KV without a job credential: %v", err)
	}
	// A job credential is not the cluster's: it submits nothing, lists nothing.
	if _, err := ca.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("submit with a job credential: %v", err)
	}
	if _, err := ca.ListJobs(ctx, &musterv1.ListJobsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("list with a job credential: %v", err)
	}
	if w, err := ca.WatchJobs(ctx, &musterv1.WatchJobsRequest{}); err == nil {
		if _, err = w.Recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("watch jobs with a job credential: %v", err)
		}
	}
	// A forged credential, or one of an ended job, opens nothing.
	forged := rendezvoustest.NewClient(t, s, security.Security{JobToken: jobA.JobId + ".00"})
	if _, err := forged.KVGet(ctx, &musterv1.KVGetRequest{Key: "secret"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("forged credential: %v", err)
	}
	if _, err := op.Cancel(ctx, &musterv1.CancelRequest{JobId: jobA.JobId, Force: true}); err != nil {
		t.Fatal(err)
	}
	a.next()
	a.publish(exited(jobA.JobId, 0, 0, 9, true))
	finalEvent(t, op, jobA.JobId)
	if _, err := ca.KVGet(ctx, &musterv1.KVGetRequest{Key: "secret"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("credential of an ended job: %v", err)
	}
}

func TestSocketServesItsOwnUser(t *testing.T) {
	dir := t.TempDir()
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.ListenAddr, c.Socket = "", filepath.Join(dir, "store.sock") })
	if s.Addr() != "unix://"+filepath.Join(dir, "store.sock") {
		t.Fatalf("addr %s", s.Addr())
	}
	if fi, err := os.Stat(filepath.Join(dir, "store.sock")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v, want 0600", fi.Mode(), err)
	}
	// No token on the socket: the kernel says who calls, and it is this user.
	c, err := storeclient.Dial(s.Addr(), security.Security{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ListNodes(context.Background(), &musterv1.ListNodesRequest{}); err != nil {
		t.Fatalf("own user on the socket: %v", err)
	}
	// A second store on the same path is refused while the first serves it.
	if _, err := storeserver.Start(context.Background(), storeserver.Config{Socket: filepath.Join(dir, "store.sock")}); err == nil || !strings.Contains(err.Error(), security.ErrSocketInUse.Error()) {
		t.Fatalf("second store on a busy socket: %v", err)
	}
}

func TestSocketRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	path := filepath.Join(testfixture.SharedDir(t), "store.sock")
	rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.ListenAddr, c.Socket = "", path })
	// Even where the file mode would let them in, the peer credentials do not.
	os.Chmod(path, 0o666)
	c := rendezvoustest.NewClientAs(t, path, 65534, 65534, nil)
	_, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("id"), Nnodes: 1}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "uid 65534 may not use this store") {
		t.Fatalf("another user submitted to a private store: %v", err)
	}
}

func TestSocketUsersRunAsThemselves(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to serve other users")
	}
	path := filepath.Join(testfixture.SharedDir(t), "agent.sock")
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.Socket, c.SocketUsers = path, true })
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("shared socket mode %v %v, want 0666", fi.Mode(), err)
	}
	op := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, op, "solo", "127.0.0.1", -1, 0)
	ctx := context.Background()

	nobody := rendezvoustest.NewClientAs(t, path, 65534, 65534, []int{100})
	resp, err := nobody.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("id"), Nnodes: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	op.PortsReserved(ctx, &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.GetRoundId(), Ports: []int32{1000, 1001}})
	asg := a.next().GetStart()
	// Who it runs as comes from the socket, not from anything the caller said.
	if got := asg.GetRunAs(); got.GetUid() != 65534 || got.GetGid() != 65534 || !slices.Equal(got.GetGroups(), []uint32{100}) {
		t.Fatalf("the job runs as %v, want uid 65534, gid 65534, groups [100]", got)
	}

	// The operator's own job runs as the agent's user, and is not theirs.
	opJob := runningJob(t, op, a)
	if opJob.GetRunAs() != nil {
		t.Fatalf("the operator's job runs as %v", opJob.GetRunAs())
	}
	if _, err := nobody.Cancel(ctx, &musterv1.CancelRequest{JobId: opJob.JobId}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another user cancelled the operator's job: %v", err)
	}
	if _, err := nobody.Signal(ctx, &musterv1.SignalRequest{JobId: opJob.JobId, Signal: 10}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another user signalled the operator's job's workers: %v", err)
	}
	w, _ := nobody.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: opJob.JobId})
	if _, err := w.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another user watched the operator's job: %v", err)
	}
	jobs, err := nobody.ListJobs(ctx, &musterv1.ListJobsRequest{})
	if err != nil || len(jobs.Jobs) != 1 || jobs.Jobs[0].JobId != resp.JobId || jobs.Jobs[0].GetOwner().GetUid() != 65534 {
		t.Fatalf("a user lists %v, %v; want only their own job", jobs.GetJobs(), err)
	}
	// A watch of the jobs shows a user what ListJobs shows them: their own
	// job, then its change, and never the operator's, listed after it.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch, err := nobody.WatchJobs(wctx, &musterv1.WatchJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := watch.Recv(); err != nil || got.GetJobId() != resp.JobId {
		t.Fatalf("a user's watch begins with %v, %v; want their own job", got, err)
	}
	if _, err := nobody.Cancel(ctx, &musterv1.CancelRequest{JobId: resp.JobId, Force: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := watch.Recv(); err != nil || got.GetJobId() != resp.JobId || got.GetState() == musterv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("a user's watch then sends %v, %v; want their own job, stopping", got, err)
	}
	wcancel()
	if _, err := nobody.Register(ctx, &musterv1.RegisterRequest{Node: &musterv1.Node{Name: "fake", Addr: "127.0.0.1", Rank: -1}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user registered an agent: %v", err)
	}
	if _, err := nobody.Cancel(ctx, &musterv1.CancelRequest{JobId: resp.JobId}); err != nil {
		t.Fatalf("a user cancelling their own job: %v", err)
	}
}

// Cordoning, draining and uncordoning a node is the cluster operator's
// alone: a local user on the agent's shared socket and a worker with its
// job's credential are refused, through the real server, and the node's
// schedule stays as the operator set it.
func TestNodeScheduleIsTheOperators(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user")
	}
	path := filepath.Join(testfixture.SharedDir(t), "agent.sock")
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.Socket, c.SocketUsers = path, true })
	op := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, op, "solo", "127.0.0.1", -1, 0)
	worker := rendezvoustest.NewClient(t, s, security.Security{JobToken: runningJob(t, op, a).JobToken})
	nobody := rendezvoustest.NewClientAs(t, path, 65534, 65534, nil)
	ctx := context.Background()
	cordon := &musterv1.SetNodeScheduleRequest{Node: "solo", Schedule: musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED}
	drain := &musterv1.SetNodeScheduleRequest{Node: "solo", Schedule: musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED}
	tests := []struct {
		name   string
		client *storeclient.Client
		req    *musterv1.SetNodeScheduleRequest
		want   codes.Code
	}{
		{"another local user", nobody, cordon, codes.PermissionDenied},
		{"a job's credential", worker, cordon, codes.PermissionDenied},
		{"the operator", op, drain, codes.OK},
		{"another local user, uncordon", nobody, &musterv1.SetNodeScheduleRequest{Node: "solo"}, codes.PermissionDenied},
		{"the operator, an unknown node", op, &musterv1.SetNodeScheduleRequest{Node: "nope", Schedule: musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED}, codes.NotFound},
		{"the operator, an unknown schedule", op, &musterv1.SetNodeScheduleRequest{Node: "solo", Schedule: 99}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.client.SetNodeSchedule(ctx, tt.req)
			if status.Code(err) != tt.want {
				t.Fatalf("set node schedule: %v; want %s", err, tt.want)
			}
		})
	}
	nodes, err := op.ListNodes(ctx, &musterv1.ListNodesRequest{})
	if err != nil || len(nodes.GetNodes()) != 1 || nodes.GetNodes()[0].GetSchedule() != musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED {
		t.Fatalf("nodes %v, %v; want solo drained, as the operator set it", nodes.GetNodes(), err)
	}
}
