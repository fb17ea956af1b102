package node_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/node"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/testwait"
)

const testToken = "0123456789abcdef0123456789abcdef"

// startNode starts a node gossiping on loopback with the Local profile.
func startNode(t *testing.T, cfg node.Config) *node.Node {
	t.Helper()
	cfg.Security.Token = testToken
	if cfg.Gossip == nil {
		cfg.Gossip = &node.Gossip{}
	}
	cfg.Gossip.Bind, cfg.Gossip.Profile = "127.0.0.1:0", cluster.Local
	cfg.Agent.TempDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(time.Second) })
	return n
}

// newCluster starts a node hosting the store and n-1 nodes that find it
// through gossip alone.
func newCluster(t *testing.T, n int) []*node.Node {
	head := startNode(t, node.Config{Listen: "127.0.0.1:0", Socket: filepath.Join(t.TempDir(), "sock"), SocketRequired: true,
		Agent: agent.Config{Name: "n0", Rank: -1}})
	nodes := []*node.Node{head}
	for i := 1; i < n; i++ {
		nodes = append(nodes, startNode(t, node.Config{Gossip: &node.Gossip{Join: []string{head.Gossip().Addr()}},
			Agent: agent.Config{Name: "n" + string(rune('0'+i)), Rank: -1}}))
	}
	return nodes
}

func TestStoreFoundThroughGossip(t *testing.T) {
	t.Parallel()
	nodes := newCluster(t, 3)
	c := rendezvoustest.NewClient(t, nodes[0].Store(), security.Security{})
	var names []string
	testwait.Until(t, 10*time.Second, "three nodes alive in the store", func() bool {
		resp, err := c.ListNodes(context.Background(), &musterv1.ListNodesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, n := range resp.Nodes {
			if n.Gossip == rendezvous.GossipAlive && len(n.Node.Addr) > 0 {
				names = append(names, n.Node.Name)
			}
		}
		return len(names) == 3
	})
	if strings.Join(names, " ") != "n0 n1 n2" {
		t.Fatalf("registered and alive: %v", names)
	}
}

func TestDuplicateNameRefused(t *testing.T) {
	t.Parallel()
	nodes := newCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := node.Start(ctx, node.Config{Security: security.Security{Token: testToken},
		Gossip: &node.Gossip{Bind: "127.0.0.1:0", Profile: cluster.Local, Join: []string{nodes[0].Gossip().Addr()}},
		Agent:  agent.Config{Name: "n1", Rank: -1, TempDir: t.TempDir()}})
	// Gossip refuses the name; should the join time out under load, the store
	// refuses the registration instead.
	if err == nil || !(strings.Contains(err.Error(), "name already taken") && strings.Contains(err.Error(), "another --name") ||
		strings.Contains(err.Error(), "registered by another agent")) {
		t.Fatalf("a second n1: %v", err)
	}
}

// A node gossip declares dead while its agent still renews its lease with
// the store fails no job: the gossip path is what broke. Once its agent
// shuts down too, the job fails naming it.
func TestGossipDeathAloneIsNoLoss(t *testing.T) {
	t.Parallel()
	nodes := newCluster(t, 3)
	c := rendezvoustest.NewClient(t, nodes[0].Store(), security.Security{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte("echo up; exec sleep 100")},
		Nnodes: 3, Nproc: 1, KillTimeoutMs: 200}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: resp.JobId})
	if err != nil {
		t.Fatal(err)
	}
	gossipDead := func() bool {
		resp, err := c.ListNodes(ctx, &musterv1.ListNodesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range resp.Nodes {
			if n.GetNode().GetName() == "n2" {
				return n.GetGossip() == rendezvous.GossipDead
			}
		}
		return false
	}
	up := 0
	var fin *musterv1.JobFinished
	for fin == nil {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if o := ev.GetOutput(); o != nil && strings.Contains(string(o.GetData()), "up") {
			if up++; up < 3 {
				continue
			}
			nodes[2].Gossip().Close() // n2 stops answering gossip; its agent stays connected
			for !gossipDead() {
				time.Sleep(20 * time.Millisecond)
			}
			// Past the store's renewal silence, n2's agent still renews.
			time.Sleep(4 * time.Second)
			jobs, err := c.ListJobs(ctx, &musterv1.ListJobsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if st := jobs.GetJobs()[0].GetState(); st != musterv1.JobState_JOB_STATE_RUNNING {
				t.Fatalf("job %s after n2's gossip alone went", st)
			}
			nodes[2].Close(time.Second)
		}
		fin = ev.GetFinished()
	}
	if up != 3 || !strings.Contains(fin.Summary, "node n2") {
		t.Fatalf("%d workers up; final %v", up, fin)
	}
}

// A node gossips how many of its GPUs are free as jobs come and go.
func TestFreeGPUsGossiped(t *testing.T) {
	t.Parallel()
	gpus, err := gpu.Parse("0,1")
	if err != nil {
		t.Fatal(err)
	}
	head := startNode(t, node.Config{Listen: "127.0.0.1:0", Socket: filepath.Join(t.TempDir(), "sock"), SocketRequired: true,
		Agent: agent.Config{Name: "n0", Rank: -1, GPUs: gpus}})
	other := startNode(t, node.Config{Gossip: &node.Gossip{Join: []string{head.Gossip().Addr()}}, Agent: agent.Config{Name: "n1", Rank: -1}})
	free := func() int {
		for _, m := range other.Gossip().Members() {
			if m.Name == "n0" {
				return m.Meta.GPUsFree
			}
		}
		return -1
	}
	waitFor := func(want int) {
		t.Helper()
		testwait.UntilShowing(t, 10*time.Second, fmt.Sprintf("n1 to see %d GPUs free on n0", want),
			func() bool { return free() == want }, func() string { return fmt.Sprint(free(), " free") })
	}
	waitFor(2)
	c := rendezvoustest.NewClient(t, head.Store(), security.Security{})
	resp, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: [][]byte{[]byte("sleep"), []byte("100")}, Nnodes: 1, Gpus: 1, KillTimeoutMs: 200}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(1)
	if _, err := c.Cancel(context.Background(), &musterv1.CancelRequest{JobId: resp.JobId}); err != nil {
		t.Fatal(err)
	}
	waitFor(2)
}

// A hosted store whose TCP listener fails under it (its socket shut down,
// so accept fails for good) reports it on the node's Err: the agent daemon
// exits on it rather than run on with a store nobody can reach.
func TestStoreFailureReachesErr(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Start(ctx, node.Config{Listen: "127.0.0.1:0", Socket: filepath.Join(t.TempDir(), "sock"), SocketRequired: true,
		Security: security.Security{Token: testToken}, Agent: agent.Config{Name: "n0", Rank: -1, TempDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(time.Second) })
	shutdownListener(t, n.Store().Addr())
	select {
	case err := <-n.Err():
		if want := "store stopped serving " + n.Store().Addr(); !strings.Contains(err.Error(), want) {
			t.Fatalf("Err: %v; want %q", err, want)
		}
	case <-ctx.Done():
		t.Fatal("no error on Err after the store's listener failed")
	}
}

// shutdownListener shuts down this process's listening TCP socket on addr:
// its accept then fails with EINVAL, as on a broken listener.
func shutdownListener(t *testing.T, addr string) {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		sa, err := syscall.Getsockname(fd)
		in, ok := sa.(*syscall.SockaddrInet4)
		if err != nil || !ok || in.Port != int(ap.Port()) {
			continue
		}
		if listening, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN); err != nil || listening != 1 {
			continue
		}
		if err := syscall.Shutdown(fd, syscall.SHUT_RD); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no listening socket on %s in this process", addr)
}
