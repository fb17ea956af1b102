package rendezvous_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/engine/uniqueid"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

// testAgent plays an agent over the real gRPC API: it registers and reads
// its command stream.
type testAgent struct {
	t       *testing.T
	c       *storeclient.Client
	session string
	cmds    musterv1.Agents_WatchClient
	cancel  context.CancelFunc
	// released are the jobs whose TCPStore next was told to release.
	released []string
}

// byteStrings is ss as a JobSpec's byte fields hold them.
func byteStrings(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func newTestAgent(t *testing.T, c *storeclient.Client, name, addr string, rank int32, gpus int) *testAgent {
	t.Helper()
	n := &musterv1.Node{Name: name, Addr: addr, Rank: rank}
	for i := 0; i < gpus; i++ {
		n.Gpus = append(n.Gpus, &musterv1.GPU{Index: int32(i), Name: "Test GPU"})
	}
	return registerTestAgent(t, c, &musterv1.RegisterRequest{Node: n})
}

// registerTestAgent registers an agent with req and watches its commands.
func registerTestAgent(t *testing.T, c *storeclient.Client, req *musterv1.RegisterRequest) *testAgent {
	t.Helper()
	resp, err := c.Register(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := c.Watch(ctx, &musterv1.WatchRequest{Session: resp.Session})
	if err != nil {
		t.Fatal(err)
	}
	return &testAgent{t: t, c: c, session: resp.Session, cmds: w, cancel: cancel}
}

// next is the next command but ReleaseStore, which it records.
func (a *testAgent) next() *musterv1.AgentCommand {
	a.t.Helper()
	for {
		cmd := a.nextAny()
		if rs := cmd.GetReleaseStore(); rs != nil {
			a.released = append(a.released, rs.GetJobId())
			continue
		}
		return cmd
	}
}

func (a *testAgent) nextAny() *musterv1.AgentCommand {
	a.t.Helper()
	cmd, err := a.cmds.Recv()
	if err != nil {
		a.t.Fatalf("watch: %v", err)
	}
	return cmd
}

func (a *testAgent) publish(evs ...*musterv1.JobEvent) error {
	_, err := a.c.Publish(context.Background(), &musterv1.PublishRequest{Session: a.session, Events: evs})
	return err
}

func exited(job string, rank, code, sig int32, stopped bool) *musterv1.JobEvent {
	return &musterv1.JobEvent{JobId: job, Event: &musterv1.JobEvent_Exited{Exited: &musterv1.WorkerExited{
		Rank: rank, ExitCode: code, Signal: sig, Stopped: stopped, Node: "n"}}}
}

func finalEvent(t *testing.T, c *storeclient.Client, job string) *musterv1.JobFinished {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: job})
	if err != nil {
		t.Fatal(err)
	}
	var last *musterv1.JobEvent
	for {
		ev, err := w.Recv()
		if err != nil {
			break
		}
		if last != nil && ev.Version != last.Version+1 {
			t.Fatalf("versions jump from %d to %d", last.Version, ev.Version)
		}
		last = ev
	}
	if last.GetFinished() == nil {
		t.Fatalf("stream ended without a final event; last %v", last)
	}
	return last.GetFinished()
}

func TestRoundAcrossTwoNodes(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	// b has an explicit node rank, so it is node rank 0 despite its name.
	a := newTestAgent(t, c, "a", "10.0.0.2", -1, 4)
	b := newTestAgent(t, c, "b", "10.0.0.1", 0, 4)
	resp, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: byteStrings("train"), Nnodes: 2, Gpus: 2, KillTimeoutMs: 100}})
	if err != nil {
		t.Fatal(err)
	}
	res := b.next().GetReservePorts()
	if res == nil || res.Count != 2 {
		t.Fatalf("node rank 0 was not asked for two ports: %v", res)
	}
	if _, err := c.PortsReserved(context.Background(), &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.RoundId, Ports: []int32{1, 2}}); err == nil {
		t.Fatal("ports accepted from a node that is not node rank 0")
	}
	if _, err := c.PortsReserved(context.Background(), &musterv1.PortsReservedRequest{Session: b.session, RoundId: res.RoundId, Ports: []int32{29500, 29501}}); err != nil {
		t.Fatal(err)
	}
	sa, sb := a.next().GetStart(), b.next().GetStart()
	if sb.NodeRank != 0 || sa.NodeRank != 1 || sa.WorldSize != 4 || sa.Nproc != 2 {
		t.Fatalf("assignments: b rank %d, a rank %d, world %d, nproc %d", sb.NodeRank, sa.NodeRank, sa.WorldSize, sa.Nproc)
	}
	if sa.MasterAddr != "10.0.0.1" || sa.MasterPort != 29500 || sa.NcclCommId != "10.0.0.1:29501" {
		t.Fatalf("master %s:%d, nccl root %s", sa.MasterAddr, sa.MasterPort, sa.NcclCommId)
	}
	id := uniqueid.ID(sa.NcclUniqueId)
	if root, _ := id.Root(); root.String() != "10.0.0.1:29501" || string(sb.NcclUniqueId) != string(sa.NcclUniqueId) {
		t.Fatalf("unique id root %v, or ids differ between nodes", root)
	}
	if len(sa.Gpus) != 2 || sa.Gpus[0] != 0 || sa.Gpus[1] != 1 {
		t.Fatalf("gpus %v", sa.Gpus)
	}
	// A node may speak only for its own ranks.
	if err := a.publish(exited(resp.JobId, 0, 0, 0, false)); err == nil {
		t.Fatal("node rank 1 published for rank 0")
	}
	// Rank 3 fails; both nodes are told to stop, the rest exit as stopped.
	if err := a.publish(exited(resp.JobId, 3, 7, 0, false)); err != nil {
		t.Fatal(err)
	}
	for _, ag := range []*testAgent{a, b} {
		if st := ag.next().GetStop(); st == nil || st.KillTimeoutMs != 100 || !strings.Contains(st.Reason, "rank 3") {
			t.Fatalf("stop command: %v", st)
		}
	}
	a.publish(exited(resp.JobId, 2, 0, 15, true))
	b.publish(exited(resp.JobId, 0, 0, 15, true), exited(resp.JobId, 1, 0, 15, true))
	fin := finalEvent(t, c, resp.JobId)
	if fin.State != musterv1.JobState_JOB_STATE_FAILED || fin.ExitCode != 7 || fin.Failure.GetRank() != 3 {
		t.Fatalf("final: %v", fin)
	}
	nodes, _ := c.ListNodes(context.Background(), &musterv1.ListNodesRequest{})
	for _, n := range nodes.Nodes {
		if len(n.BusyGpus) != 0 {
			t.Fatalf("node %s still holds GPUs %v", n.Node.Name, n.BusyGpus)
		}
	}
}

func TestSubmitErrors(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	submit := func(spec *musterv1.JobSpec) error {
		_, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: spec})
		return err
	}
	if err := submit(&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1}); err == nil || !strings.Contains(err.Error(), "no agent") {
		t.Fatalf("no agents: %v", err)
	}
	newTestAgent(t, c, "solo", "127.0.0.1", -1, 2)
	tests := []struct {
		spec *musterv1.JobSpec
		want string
	}{
		{&musterv1.JobSpec{Nnodes: 1}, "no command"},
		{&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Gpus: 4}, "--gpus 4: node solo has 2 GPUs (0: Test GPU, 1: Test GPU), 2 free"},
		{&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Gpus: 2, Nproc: 3}, "not a multiple of --nproc 3"},
		{&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 2}, "--nnodes 2: only 1"},
		{&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Env: byteStrings("1BAD=x")}, "--env \"1BAD=x\""},
		{&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 2, Hosts: []string{"ghost", "solo"}},
			"--nnodes 2 on the listed hosts: 1 of 2 ready (solo); 1 missing; not usable: listed host ghost is not registered"},
		{&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Exclude: []string{"127.0.0.1"}},
			"--nnodes 1: 0 of 1 ready; 1 missing; not usable: node solo is excluded"},
		{&musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 2, Hosts: []string{"solo"}}, "--nnodes 2 is more than the 1 hosts listed"},
	}
	for _, tt := range tests {
		err := submit(tt.spec)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("submit %v: %v, want %q", tt.spec, err, tt.want)
		}
	}
}

func TestCancelAndLostNode(t *testing.T) {
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.SessionGrace = 100 * time.Millisecond })
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "127.0.0.1", -1, 0)
	resp, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Nproc: 2}})
	if err != nil {
		t.Fatal(err)
	}
	res := a.next().GetReservePorts()
	c.PortsReserved(context.Background(), &musterv1.PortsReservedRequest{Session: a.session, RoundId: res.RoundId, Ports: []int32{1000, 1001}})
	a.next()
	if _, err := c.Cancel(context.Background(), &musterv1.CancelRequest{JobId: resp.JobId, Force: true, ExitCode: 130}); err != nil {
		t.Fatal(err)
	}
	if st := a.next().GetStop(); st == nil || st.KillTimeoutMs != 0 {
		t.Fatalf("forced cancel: %v", st)
	}
	// The node vanishes instead of reporting: once the session grace is
	// over, its workers count as ended.
	a.cancel()
	fin := finalEvent(t, c, resp.JobId)
	if fin.State != musterv1.JobState_JOB_STATE_CANCELLED || fin.ExitCode != 130 {
		t.Fatalf("final: %v", fin)
	}
}

func TestKVAndBarrierOverGRPC(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	op := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, op, "solo", "127.0.0.1", -1, 0)
	asg := runningJob(t, op, a)
	c := rendezvoustest.NewClient(t, s, security.Security{JobToken: asg.JobToken})
	ctx := context.Background()
	got := make(chan []byte)
	go func() {
		v, _ := c.Get(ctx, "addr", true)
		got <- v
	}()
	if _, err := c.KVSet(ctx, &musterv1.KVSetRequest{Key: "addr", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if v := <-got; string(v) != "x" {
		t.Fatalf("waiting get = %q", v)
	}
	if _, err := c.KVGet(ctx, &musterv1.KVGetRequest{Scope: asg.JobId, Key: "none"}); status.Code(err) != codes.NotFound {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := c.Barrier(ctx, &musterv1.BarrierRequest{Name: "b", Count: 2, Participant: "0", TimeoutMs: 50}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("lonely barrier: %v", err)
	}
}

func TestTokenRequired(t *testing.T) {
	const token = "0123456789abcdef0123"
	s := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.Security.Token = token })
	ctx := context.Background()
	for _, tt := range []struct {
		token string
		code  codes.Code
	}{{"", codes.Unauthenticated}, {"wrong-token-0123456789", codes.Unauthenticated}, {token, codes.OK}} {
		c, err := storeclient.Dial(s.Addr(), security.Security{Token: tt.token})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.ListNodes(ctx, &musterv1.ListNodesRequest{})
		if status.Code(err) != tt.code {
			t.Errorf("unary with token %q: %v", tt.token, err)
		}
		w, _ := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: "none"})
		_, err = w.Recv()
		if want := map[codes.Code]codes.Code{codes.OK: codes.NotFound}[tt.code]; tt.code == codes.OK && status.Code(err) != want || tt.code != codes.OK && status.Code(err) != tt.code {
			t.Errorf("stream with token %q: %v", tt.token, err)
		}
	}
}
