// Package rendezvoustest starts stores and dials them for tests.
package rendezvoustest

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

// token is a test store's cluster token unless the test sets another.
const token = "muster-test-cluster-token"

// NewStore starts a store on a free loopback port for a test and closes it
// when the test ends. Calls need its cluster token (Security gives it). edit
// may change the configuration first.
func NewStore(t testing.TB, edit func(*storeserver.Config)) *storeserver.Server {
	t.Helper()
	var mu sync.Mutex
	var refused []error
	// Test agents renew no lease: a suspicion is a loss at once, and a lost
	// node's workers count as gone at once, unless a test says otherwise.
	cfg := storeserver.Config{Logger: zaptest.NewLogger(t), ListenAddr: "127.0.0.1:0", Security: security.Security{Token: token},
		RenewSilence: -1, FenceAfter: time.Nanosecond,
		Refused: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			refused = append(refused, err)
		}}
	if edit != nil {
		edit(&cfg)
	}
	s, err := storeserver.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A state change the store's tables refuse is a bug: it fails the test.
	// Registered first, this check runs after Close.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range refused {
			t.Errorf("store refused a state change: %v", err)
		}
	})
	t.Cleanup(s.Close)
	return s
}

// Security is how a test's client reaches s as the cluster operator: with
// its cluster token.
func Security(s *storeserver.Server) security.Security {
	return security.Security{Token: s.Security().Token}
}

// NewClient dials s for a test; a zero sec dials as the cluster operator
// (Security).
func NewClient(t testing.TB, s *storeserver.Server, sec security.Security) *storeclient.Client {
	t.Helper()
	if sec == (security.Security{}) {
		sec = Security(s)
	}
	c, err := storeclient.Dial(s.Addr(), sec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// NewClientAs connects to the Unix socket at path as another user: from a
// thread running as uid and gid with the supplementary groups extra, so that
// the store's peer-credential check sees that user. It needs root.
func NewClientAs(t testing.TB, path string, uid, gid int, extra []int) *storeclient.Client {
	t.Helper()
	type result struct {
		conn net.Conn
		err  error
	}
	dial := func(context.Context, string) (net.Conn, error) {
		ch := make(chan result, 1)
		go func() {
			// The thread never unlocks: it dies with this goroutine, and its
			// credentials with it.
			runtime.LockOSThread()
			// Raw calls change this thread only (unix.Setgroups is one).
			err := unix.Setgroups(extra)
			if err == nil {
				if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
					err = e
				}
			}
			if err == nil {
				if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
					err = e
				}
			}
			if err != nil {
				ch <- result{err: err}
				return
			}
			c, err := net.Dial("unix", path)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.conn, r.err
	}
	conn, err := grpc.NewClient("passthrough:///"+path, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return storeclient.NewClient(conn)
}
