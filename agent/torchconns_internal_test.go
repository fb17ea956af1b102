package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storewire"
	"github.com/musterhq/muster/testwait"
)

// A node's agent says of each connection asked about whether a process of
// the job's user made it there, looking up the real sockets.
func TestJudgeTorchConns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: connects as another uid")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dial := func(uid int) *musterv1.TorchConn {
		t.Helper()
		done := make(chan net.Conn, 1)
		go func() {
			// This thread alone makes sockets as uid; it ends with the goroutine.
			runtime.LockOSThread()
			unix.Setfsuid(uid)
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Error(err)
			}
			done <- c
		}()
		c := <-done
		if c == nil {
			t.FailNow()
		}
		t.Cleanup(func() { c.Close() })
		return &musterv1.TorchConn{Client: c.LocalAddr().String(), Server: c.RemoteAddr().String()}
	}
	mine, nobodys := dial(os.Geteuid()), dial(65534)
	gone := &musterv1.TorchConn{Client: "127.0.0.1:1", Server: l.Addr().String()}
	bad := &musterv1.TorchConn{Client: "b:1", Server: l.Addr().String()}
	d, err := security.OpenSockDiag()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	verdicts := judgeTorchConns([]*musterv1.TorchConn{mine, nobodys, gone, bad}, uint32(os.Geteuid()), d.Owner)
	for i, want := range []string{"", "a process of uid 65534, not of the job's user", "no socket of this node made it", "connection's end"} {
		v := verdicts[i]
		if v.GetAllowed() != (want == "") || !strings.Contains(v.GetReason(), want) {
			t.Errorf("connection %d: %v, want %q", i, v, want)
		}
	}
	// The job of another user: the agent's own socket is not theirs.
	if v := judgeTorchConns([]*musterv1.TorchConn{mine}, 1000, d.Owner)[0]; v.GetAllowed() {
		t.Error("another user's job allowed the agent's user")
	}
}

// A crowd of connections makes a few questions, each within the bound of
// one, and about one node of one round; every connection gets its own
// verdict.
func TestTorchConnCheckerBatches(t *testing.T) {
	var asks, most, held atomic.Int64
	release := make(chan struct{})
	ask := func(ctx context.Context, round string, conns []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error) {
		if asks.Add(1) <= 4 {
			held.Add(int64(len(conns)))
			<-release // the crowd gathers behind the first questions
		}
		for n := int64(len(conns)); ; {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		verdicts := make([]*musterv1.TorchConnVerdict, len(conns))
		node := ""
		for i, c := range conns {
			// The server's address names the round.
			if !strings.HasPrefix(c.GetServer(), round+".") {
				return nil, fmt.Errorf("round %s asked about %s", round, c.GetServer())
			}
			p, _ := netip.ParseAddrPort(c.GetClient())
			if node == "" {
				node = p.Addr().String()
			} else if node != p.Addr().String() {
				return nil, fmt.Errorf("one question about %s and %s", node, p.Addr())
			}
			// Odd ports are another user's.
			verdicts[i] = &musterv1.TorchConnVerdict{Allowed: p.Port()%2 == 0, Reason: "odd"}
		}
		return verdicts, nil
	}
	c := newTorchConnChecker(context.Background(), nil, ask)
	const n = 6000
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			round := []string{"10", "11"}[i%4/2]
			client := netip.AddrPortFrom(netip.MustParseAddr([]string{"10.0.0.2", "10.0.0.3"}[i%4%2]), uint16(10000+i))
			server := netip.MustParseAddrPort(round + ".0.0.1:29500")
			errs[i] = c.check(context.Background(), round, client, server)
		}()
	}
	// Everyone waits, in the four first questions or behind them, before
	// they end.
	testwait.Until(t, 20*time.Second, "every question to wait", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		queued := 0
		for _, q := range c.queues {
			queued += len(q)
		}
		return queued+int(held.Load()) >= n
	})
	close(release)
	wg.Wait()
	for i, err := range errs {
		if (i%2 == 0) != (err == nil) {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	// Four queues of 1,500, each at most one waiting plus two questions.
	if got := asks.Load(); got > 12 {
		t.Errorf("%d questions for %d connections", got, n)
	}
	if got := most.Load(); got > storewire.MaxTorchConns {
		t.Errorf("a question about %d connections", got)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queues) != 0 {
		t.Errorf("%d queues left", len(c.queues))
	}
}

// A store that cannot answer now is asked again; one that says no, or
// does not answer in time, refuses the connection.
func TestTorchConnCheckerRetries(t *testing.T) {
	client, server := netip.MustParseAddrPort("10.0.0.2:40000"), netip.MustParseAddrPort("10.0.0.1:29500")
	var calls atomic.Int64
	c := newTorchConnChecker(context.Background(), nil, func(ctx context.Context, _ string, conns []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error) {
		if calls.Add(1) < 3 {
			return nil, status.Error(codes.Unavailable, "registering again")
		}
		return []*musterv1.TorchConnVerdict{{Allowed: true}}, nil
	})
	if err := c.check(context.Background(), "r", client, server); err != nil || calls.Load() != 3 {
		t.Fatalf("%v after %d calls", err, calls.Load())
	}
	c = newTorchConnChecker(context.Background(), nil, func(context.Context, string, []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error) {
		return nil, status.Error(codes.FailedPrecondition, "not the node that serves the job's TCPStore")
	})
	if err := c.check(context.Background(), "r", client, server); err == nil || !strings.Contains(err.Error(), "not the node") {
		t.Fatalf("refused by the store: %v", err)
	}
	c = newTorchConnChecker(context.Background(), nil, func(context.Context, string, []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error) {
		return nil, nil // no verdict
	})
	if err := c.check(context.Background(), "r", client, server); err == nil {
		t.Fatal("allowed without a verdict")
	}
	// The checker's own context bounds the retries as the wait would.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c = newTorchConnChecker(ctx, nil, func(context.Context, string, []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error) {
		return nil, status.Error(codes.ResourceExhausted, "busy")
	})
	if err := c.check(context.Background(), "r", client, server); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("never answered: %v", err)
	}
}
