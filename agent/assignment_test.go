package agent

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/engine/uniqueid"
	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// validAssignment is node rank 1's share of a two-node job with two workers
// per node, as the store would send it.
func validAssignment() *musterv1.Assignment {
	id, err := uniqueid.New(netip.MustParseAddrPort("127.0.0.2:29501"))
	if err != nil {
		panic(err)
	}
	return &musterv1.Assignment{
		JobId: "j-1", RoundId: "r-1",
		Spec:     &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 2, Nproc: 2, Gpus: 2},
		NodeRank: 1, Nnodes: 2,
		NodeAddrs: []string{"127.0.0.2", "127.0.0.3"}, NodeNames: []string{"a", "b"}, NodeSlots: []int32{2, 2},
		Gpus: []int32{0, 1}, Nproc: 2, WorldSize: 4,
		MasterAddr: "127.0.0.2", MasterPort: 29500, NcclCommId: "127.0.0.2:29501", NcclUniqueId: id[:],
	}
}

// bigJob makes a a node of a job larger than RosterInlineNodes, at node
// rank rank, whose assignment carries no roster.
func bigJob(a *musterv1.Assignment, rank int32) {
	a.Nnodes = jobspec.RosterInlineNodes + 1
	a.WorldSize = a.Nnodes * a.Nproc
	a.Spec.Nnodes = a.Nnodes
	a.NodeRank = rank
	a.NodeAddrs, a.NodeNames, a.NodeSlots = nil, nil, nil
}

func TestCheckAssignment(t *testing.T) {
	tests := []struct {
		name string
		edit func(a *musterv1.Assignment)
		want string // "" for a valid one
	}{
		{"valid", func(a *musterv1.Assignment) {}, ""},
		// Past RosterInlineNodes only node rank 0's assignment has the roster.
		{"large job without roster", func(a *musterv1.Assignment) { bigJob(a, 1) }, ""},
		{"large job's rank 0 without roster", func(a *musterv1.Assignment) { bigJob(a, 0) }, "no node list"},
		{"small job without roster", func(a *musterv1.Assignment) { a.NodeRank = 1; a.NodeAddrs, a.NodeNames, a.NodeSlots = nil, nil, nil }, "no node list"},
		{"no spec", func(a *musterv1.Assignment) { a.Spec = nil }, "no job spec"},
		{"bad spec", func(a *musterv1.Assignment) { a.Spec.Argv = nil }, "job spec: no command"},
		{"short unique ID", func(a *musterv1.Assignment) { a.NcclUniqueId = a.NcclUniqueId[:12] }, "NCCL unique ID is 12 bytes, want 128"},
		{"long unique ID", func(a *musterv1.Assignment) { a.NcclUniqueId = append(a.NcclUniqueId, 0) }, "NCCL unique ID is 129 bytes, want 128"},
		{"no unique ID", func(a *musterv1.Assignment) { a.NcclUniqueId = nil }, "NCCL unique ID is 0 bytes"},
		{"job ID a path", func(a *musterv1.Assignment) { a.JobId = "../etc" }, `job ID "../etc" is not a name`},
		{"no round ID", func(a *musterv1.Assignment) { a.RoundId = "" }, `round ID "" is not a name`},
		{"addresses short", func(a *musterv1.Assignment) { a.NodeAddrs = a.NodeAddrs[:1] },
			"node lists of different lengths: 2 nodes, 1 addresses, 2 names, 2 slot counts"},
		{"names long", func(a *musterv1.Assignment) { a.NodeNames = append(a.NodeNames, "c") }, "node lists of different lengths"},
		{"slots short", func(a *musterv1.Assignment) { a.NodeSlots = nil }, "node lists of different lengths"},
		{"no nodes", func(a *musterv1.Assignment) { a.Nnodes = 0 }, "0 nodes, outside 1..10000"},
		{"node rank too high", func(a *musterv1.Assignment) { a.NodeRank = 2 }, "node rank 2 is outside 0..1 for 2 nodes"},
		{"node rank negative", func(a *musterv1.Assignment) { a.NodeRank = -1 }, "node rank -1 is outside"},
		{"no workers", func(a *musterv1.Assignment) { a.Nproc = 0 }, "0 workers per node"},
		{"nproc not the spec's", func(a *musterv1.Assignment) { a.Nproc = 1; a.WorldSize = 2; a.NodeSlots = []int32{1, 1} },
			"1 workers per node, but the job spec asks for 2"},
		{"world size", func(a *musterv1.Assignment) { a.WorldSize = 3 }, "world size 3 is not 2 nodes times 2 workers"},
		{"world size overflows", func(a *musterv1.Assignment) { a.WorldSize = -2147483648 }, "world size"},
		{"slots do not add up", func(a *musterv1.Assignment) { a.NodeSlots = []int32{3, 1} }, "this node (node rank 1) has 1 slots, but 2 workers"},
		{"slots sum", func(a *musterv1.Assignment) { a.NodeSlots = []int32{1, 2} }, "slots add up to 3, not the world size 4"},
		{"GPU count", func(a *musterv1.Assignment) { a.Gpus = []int32{0} }, "1 GPUs on this node, but the job spec asks for 2"},
		{"GPU repeated", func(a *musterv1.Assignment) { a.Gpus = []int32{1, 1} }, "GPU index 1 is negative or repeated"},
		{"GPU negative", func(a *musterv1.Assignment) { a.Gpus = []int32{0, -1} }, "GPU index -1"},
		{"address not an IP", func(a *musterv1.Assignment) { a.NodeAddrs[1] = "b; rm -rf /" }, `node rank 1's address "b; rm -rf /" is not an IP address`},
		{"master elsewhere", func(a *musterv1.Assignment) { a.MasterAddr = "127.0.0.9" }, "master address \"127.0.0.9\" is not node rank 0's"},
		{"master port", func(a *musterv1.Assignment) { a.MasterPort = 70000 }, "master port 70000"},
		{"NCCL root", func(a *musterv1.Assignment) { a.NcclCommId = "127.0.0.2" }, "NCCL bootstrap root \"127.0.0.2\""},
		{"restart count", func(a *musterv1.Assignment) { a.RestartCount = -1 }, "restart count -1"},
		{"token with NUL", func(a *musterv1.Assignment) { a.JobToken = "a\x00b" }, "job credential is longer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := validAssignment()
			tt.edit(a)
			err := checkAssignment(a)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("checkAssignment = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestUnplannedWorkersAreBounded(t *testing.T) {
	tests := []struct {
		nodeRank, nproc int32
		want            []int
	}{
		{1, 2, []int{2, 3}},
		{0, 0, []int{0}},
		{-5, 1 << 30, []int{0}},
		{1 << 30, 1, []int{jobspec.MaxNodes - 1}},
	}
	for _, tt := range tests {
		plans := unplannedWorkers(&musterv1.Assignment{NodeRank: tt.nodeRank, Nproc: tt.nproc})
		var got []int
		for _, p := range plans {
			got = append(got, p.rank)
		}
		if len(got) != len(tt.want) || got[0] != tt.want[0] || got[len(got)-1] != tt.want[len(tt.want)-1] {
			t.Errorf("node rank %d, nproc %d: ranks %v, want %v", tt.nodeRank, tt.nproc, got, tt.want)
		}
	}
}

// fakeStore is a store that sends an agent whatever it is given, over real
// gRPC, and records what the agent publishes.
type fakeStore struct {
	musterv1.UnimplementedAgentsServer
	cmds chan *musterv1.AgentCommand
	mu   sync.Mutex
	evs  []*musterv1.JobEvent
	more chan struct{}
}

func (f *fakeStore) Register(context.Context, *musterv1.RegisterRequest) (*musterv1.RegisterResponse, error) {
	return &musterv1.RegisterResponse{Session: "s-1"}, nil
}

func (f *fakeStore) Watch(_ *musterv1.WatchRequest, stream musterv1.Agents_WatchServer) error {
	// As the real store, the header says the stream is served.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for {
		select {
		case cmd := <-f.cmds:
			if err := stream.Send(cmd); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (f *fakeStore) Publish(_ context.Context, req *musterv1.PublishRequest) (*musterv1.PublishResponse, error) {
	f.mu.Lock()
	f.evs = append(f.evs, req.GetEvents()...)
	f.mu.Unlock()
	select {
	case f.more <- struct{}{}:
	default:
	}
	return &musterv1.PublishResponse{}, nil
}

// exits waits for n exit events of job.
func (f *fakeStore) exits(t *testing.T, job string, n int) []*musterv1.WorkerExited {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		var out []*musterv1.WorkerExited
		for _, ev := range f.evs {
			if ex := ev.GetExited(); ex != nil && ev.GetJobId() == job {
				out = append(out, ex)
			}
		}
		f.mu.Unlock()
		if len(out) >= n {
			return out
		}
		select {
		case <-f.more:
		case <-deadline:
			t.Fatalf("job %s: %d of %d exits published", job, len(out), n)
		}
	}
}

func startFakeStore(t *testing.T) (*fakeStore, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeStore{cmds: make(chan *musterv1.AgentCommand, 16), more: make(chan struct{}, 1)}
	srv := grpc.NewServer()
	musterv1.RegisterAgentsServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return f, lis.Addr().String()
}

// An assignment that does not add up fails its job with a message, from
// the agent, which goes on running: the next job on the node runs.
func TestBadAssignmentFailsItsJobNotTheAgent(t *testing.T) {
	store, addr := startFakeStore(t)
	a, err := Start(context.Background(), Config{Logger: zaptest.NewLogger(t), StoreAddr: addr, Name: "n1", Addr: "127.0.0.3",
		Rank: -1, Environ: []string{"PATH=/usr/bin:/bin"}, TempDir: t.TempDir(), Security: security.Security{Token: "t-0123456789abcdef"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(0) })
	tests := []struct {
		name string
		edit func(a *musterv1.Assignment)
		want string
	}{
		{"short unique ID", func(a *musterv1.Assignment) { a.NcclUniqueId = a.NcclUniqueId[:12] }, "NCCL unique ID is 12 bytes, want 128"},
		{"node lists of different lengths", func(a *musterv1.Assignment) { a.NodeNames = nil }, "node lists of different lengths"},
		{"node rank out of range", func(a *musterv1.Assignment) { a.NodeRank = 2 }, "node rank 2 is outside 0..1 for 2 nodes"},
		{"world size", func(a *musterv1.Assignment) { a.WorldSize = 8 }, "world size 8 is not 2 nodes times 2 workers"},
		{"GPU count", func(a *musterv1.Assignment) { a.Gpus = nil }, "0 GPUs on this node, but the job spec asks for 2"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asg := validAssignment()
			asg.JobId = "j-bad-" + string(rune('a'+i))
			tt.edit(asg)
			store.cmds <- &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Start{Start: asg}}
			exits := store.exits(t, asg.JobId, 2)
			for _, ex := range exits {
				if ex.ExitCode != 1 || !strings.Contains(ex.Error, "the store's assignment does not add up: "+tt.want) || ex.Node != "n1" {
					t.Errorf("exit %+v, want an error naming %q", ex, tt.want)
				}
			}
		})
	}
	// The agent lives on: a job that adds up runs.
	asg := validAssignment()
	asg.JobId, asg.NodeRank, asg.Spec.Gpus, asg.Gpus = "j-good", 0, 0, nil
	asg.NodeAddrs[0], asg.MasterAddr, asg.NcclCommId = "127.0.0.3", "127.0.0.3", "127.0.0.3:29501"
	store.cmds <- &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Start{Start: asg}}
	for _, ex := range store.exits(t, "j-good", 2) {
		if ex.ExitCode != 0 || ex.Error != "" {
			t.Errorf("good job's exit: %+v", ex)
		}
	}
}

// FuzzAssignment: checking and planning any assignment the wire can carry
// never panics; an assignment that passes the check plans one worker per
// local rank.
func FuzzAssignment(f *testing.F) {
	seed := func(edit func(a *musterv1.Assignment)) {
		a := validAssignment()
		edit(a)
		b, err := proto.Marshal(a)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(func(a *musterv1.Assignment) {})
	seed(func(a *musterv1.Assignment) { a.NcclUniqueId = a.NcclUniqueId[:5] })
	seed(func(a *musterv1.Assignment) { a.NodeRank = 7 })
	seed(func(a *musterv1.Assignment) { a.NodeSlots = nil })
	seed(func(a *musterv1.Assignment) { a.Nproc = 1 << 30 })
	seed(func(a *musterv1.Assignment) { r := int32(3); a.Spec.StdinRank = &r })
	f.Add([]byte{})
	dir := f.TempDir()
	c, err := storeclient.Dial("127.0.0.1:1", security.Security{Token: "t-0123456789abcdef"})
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	a := &Agent{cfg: Config{Name: "fuzz", Addr: "127.0.0.3", TempDir: dir, SysRoot: dir, Environ: []string{"PATH=/bin"}},
		log: zap.NewNop(), client: c}
	f.Fuzz(func(t *testing.T, b []byte) {
		asg := &musterv1.Assignment{}
		if proto.Unmarshal(b, asg) != nil {
			return
		}
		// What would touch files outside the test's own stays inside it.
		asg.RunAs = nil
		if spec := asg.GetSpec(); spec != nil && len(spec.LogDir) > 0 {
			spec.LogDir = []byte(dir)
		}
		checkErr := checkAssignment(asg)
		plans, files, err := a.plan(asg)
		if err != nil {
			if checkErr != nil && !strings.Contains(err.Error(), checkErr.Error()) {
				t.Fatalf("plan says %v, check said %v", err, checkErr)
			}
			unplannedWorkers(asg)
			return
		}
		defer func() {
			files.feed.close()
			os.RemoveAll(files.dir)
			files.lock.Close()
		}()
		if checkErr != nil {
			t.Fatalf("planned an assignment that does not add up: %v", checkErr)
		}
		if len(plans) != int(asg.GetNproc()) {
			t.Fatalf("%d plans for %d workers", len(plans), asg.GetNproc())
		}
		for l, p := range plans {
			if want := int(asg.GetNodeRank()*asg.GetNproc()) + l; p.rank != want || p.rank >= int(asg.GetWorldSize()) {
				t.Fatalf("local rank %d has rank %d, want %d of %d", l, p.rank, want, asg.GetWorldSize())
			}
		}
	})
}
