package agent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/testwait"
)

// proxy forwards TCP connections to a store, each byte delay later than it
// came (a path whose round trip is twice delay, as on a lossy link where
// TCP retransmits); cut severs them all and refuses new ones until restore,
// as a broken network does.
type proxy struct {
	lis    net.Listener
	target string
	delay  time.Duration
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newProxy(t *testing.T, target string, delay time.Duration) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis, target: target, delay: delay}
	t.Cleanup(func() { lis.Close(); p.cut() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pass(s, c)
			go p.pass(c, s)
		}
	}()
	return p
}

// pass copies what src sends to dst, in order, p.delay later.
func (p *proxy) pass(dst, src net.Conn) {
	defer dst.Close()
	if p.delay == 0 {
		io.Copy(dst, src)
		return
	}
	type chunk struct {
		data []byte
		at   time.Time
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now().Add(p.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.data); err != nil {
			src.Close()
			return
		}
	}
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

func waitFiles(t *testing.T, dir, pattern string, n int) {
	t.Helper()
	testwait.Until(t, 20*time.Second, fmt.Sprintf("%d files %s", n, pattern), func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		return len(m) >= n
	})
}

// jobEvents follows a job on c from the store incarnation storeID (empty:
// this one) and returns its exits by rank, its end, and whether the store
// said it restarted.
func jobEvents(t *testing.T, c *storeclient.Client, job, storeID string) (map[int32]*musterv1.WorkerExited, *musterv1.JobFinished, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &musterv1.WatchJobRequest{JobId: job, Attach: true}
	if storeID != "" {
		// As a launcher that read this far from the store that went away.
		req.StoreId, req.FromVersion = storeID, 1000
	}
	w, err := c.WatchJob(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	exits, restarted := map[int32]*musterv1.WorkerExited{}, false
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("job stream ended before the job: %v", err)
		}
		if ev.GetRestarted() != nil {
			restarted = true
		}
		if ex := ev.GetExited(); ex != nil {
			exits[ex.Rank] = ex
		}
		if f := ev.GetFinished(); f != nil {
			return exits, f, restarted
		}
	}
}

// workersWaiting is a job whose workers say they started, wait for a file
// named go, then exit: rank failRank with code 3 once every rank is done,
// the others with 0.
func workersWaiting(dir string, failRank int) *musterv1.JobSpec {
	return &musterv1.JobSpec{
		Argv:   args("sh", "-c", fmt.Sprintf(`touch %[1]s/started-$RANK; while [ ! -e %[1]s/go ]; do sleep 0.02; done; echo "rank $RANK done"; touch %[1]s/done-$RANK; [ "$RANK" != %[2]d ] && exit 0; while [ $(ls %[1]s | grep -c done) -lt 4 ]; do sleep 0.02; done; exit 3`, dir, failRank)),
		Nnodes: 2, Nproc: 2, KillTimeoutMs: 2000,
	}
}

func TestExitsArriveAcrossACutConnection(t *testing.T) {
	t.Parallel()
	proxies := make([]*proxy, 2)
	tc := agenttest.NewCluster(t, 2, func(i int, cfg *agent.Config) {
		proxies[i] = newProxy(t, cfg.StoreAddr, 0)
		cfg.StoreAddr = proxies[i].addr()
	})
	dir := t.TempDir()
	sub, err := tc.Client.Submit(context.Background(), &musterv1.SubmitRequest{Spec: workersWaiting(dir, -1)})
	if err != nil {
		t.Fatal(err)
	}
	waitFiles(t, dir, "started-*", 4)
	// Both agents lose the store; every worker ends meanwhile.
	for _, p := range proxies {
		p.cut()
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	// Each agent saw its two workers end while no store heard it.
	for _, a := range tc.Agents {
		testwait.Until(t, 20*time.Second, "the agent to hold its workers' exits", func() bool { return agent.UnackedExits(a) == 2 })
	}
	for _, p := range proxies {
		p.restore()
	}
	exits, fin, _ := jobEvents(t, tc.Client, sub.JobId, "")
	if fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED || len(exits) != 4 {
		t.Fatalf("job ended %v (%s) with %d exits", fin.State, fin.Summary, len(exits))
	}
}

func TestJobOutlivesARestartedStore(t *testing.T) {
	t.Parallel()
	tc := agenttest.NewCluster(t, 2, nil)
	dir := t.TempDir()
	sub, err := tc.Client.Submit(context.Background(), &musterv1.SubmitRequest{Spec: workersWaiting(dir, 3)})
	if err != nil {
		t.Fatal(err)
	}
	waitFiles(t, dir, "started-*", 4)
	addr := tc.Store.Addr()
	tc.Store.Close()
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	waitFiles(t, dir, "done-*", 4)
	// A new store on the same address: the agents come back to it.
	rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.ListenAddr = addr })
	testwait.Until(t, 10*time.Second, "the agents to register with the new store", func() bool {
		nodes, err := tc.Client.ListNodes(context.Background(), &musterv1.ListNodesRequest{})
		return err == nil && len(nodes.Nodes) == 2
	})
	exits, fin, restarted := jobEvents(t, tc.Client, sub.JobId, sub.StoreId)
	if !restarted {
		t.Error("the follower was not told the store restarted")
	}
	if fin.State != musterv1.JobState_JOB_STATE_FAILED || fin.ExitCode != 3 || fin.Failure.GetRank() != 3 {
		t.Fatalf("job ended %v with %d: %s", fin.State, fin.ExitCode, fin.Summary)
	}
	if len(exits) != 4 {
		t.Fatalf("%d exits arrived, want 4: %v", len(exits), exits)
	}
}
