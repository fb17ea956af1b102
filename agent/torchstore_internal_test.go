package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/kv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/tcpstore"
	"github.com/musterhq/muster/testwait"
)

// torchAgent is an agent of just its TCPStores, on addr.
func torchAgent(t *testing.T, addr string, budget int64, log *zap.Logger) *Agent {
	a := &Agent{cfg: Config{Addr: addr}, log: log, ctx: context.Background(), torchStores: map[string]*torchStore{},
		torchConns: torchConnLimit(), torchBytes: kv.NewBudget(budget, "this agent's TCPStores")}
	t.Cleanup(func() {
		for job := range a.torchStores {
			a.releaseTorchStore(job)
		}
	})
	return a
}

// serveJob opens job's store for a round whose start says its nodes and user.
func serveJob(t *testing.T, a *Agent, job string, uid uint32, nodes ...string) string {
	t.Helper()
	port, err := a.torchStorePort(job, job+"-r0")
	if err != nil {
		t.Fatal(err)
	}
	a.allowTorchStoreUsers(&musterv1.Assignment{JobId: job, RoundId: job + "-r0", NodeAddrs: nodes,
		RunAs: &musterv1.Identity{Uid: uid, Gid: uid}})
	return net.JoinHostPort(a.cfg.Addr, strconv.Itoa(int(port)))
}

// dialAs connects to a TCPStore with a socket of uid: the kernel takes a
// socket's owner from its maker's file-system uid, which this thread alone
// takes on (the thread ends with the goroutine).
func dialAs(uid int, addr string, within time.Duration) (*tcpstore.Client, error) {
	type result struct {
		c   *tcpstore.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		unix.Setfsuid(uid)
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		c, err := tcpstore.Dial(ctx, addr)
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// A job's TCPStore serves processes of the job's user on this host, and
// no other user's: they neither read nor write its keys.
func TestTorchStoreServesOnlyTheJobsUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: connects as another uid")
	}
	a := torchAgent(t, "127.0.0.1", torchStoreBytes, zaptest.NewLogger(t))
	rootJob := serveJob(t, a, "j-root", 0, "127.0.0.1")
	nobodyJob := serveJob(t, a, "j-nobody", 65534, "127.0.0.1")
	for _, tt := range []struct {
		name string
		uid  int
		addr string
		ok   bool
	}{
		{"root's job, root", 0, rootJob, true},
		{"root's job, another user", 65534, rootJob, false},
		{"another user's job, theirs", 65534, nobodyJob, true},
		{"another user's job, a third", 65533, nobodyJob, false},
		{"another user's job, root", 0, nobodyJob, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := dialAs(tt.uid, tt.addr, time.Second)
			if !tt.ok {
				if err == nil {
					v, gerr := c.Get("secret")
					c.Close()
					t.Fatalf("uid %d connected to the store; it read %q, %v", tt.uid, v, gerr)
				}
				return
			}
			if err != nil {
				t.Fatalf("uid %d: %v", tt.uid, err)
			}
			defer c.Close()
			if err := c.Set("secret", []byte("s")); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get("secret"); err != nil || string(v) != "s" {
				t.Fatalf("get: %q %v", v, err)
			}
		})
	}
}

// Who connects from elsewhere is judged by address first: the job's
// nodes only, and this host's own addresses never without a local socket's
// owner. From another of the job's nodes, that node's agent says whose the
// socket is.
func TestTorchStoreUsersFromOtherHosts(t *testing.T) {
	u := &torchUsers{uid: 1000, nodes: map[netip.Addr]bool{netip.MustParseAddr("10.0.0.2"): true, netip.MustParseAddr("127.0.0.1"): true}}
	local := func(ip netip.Addr) bool { return ip == netip.MustParseAddr("10.0.0.1") }
	for _, tt := range []struct {
		name   string
		from   string
		uid    uint32
		found  bool
		remote error // the other node's word
		err    string
		asked  bool
	}{
		{"a node of the job, the job's user there", "10.0.0.2", 0, false, nil, "", true},
		{"a node of the job, another user there", "10.0.0.2", 0, false, errors.New("node b: a process of uid 65534"), "uid 65534", true},
		{"a host that is not", "10.0.0.3", 0, false, nil, "10.0.0.3 is not one of the job's nodes", false},
		{"this host, the job's user", "10.0.0.1", 1000, true, nil, "", false},
		{"this host, another user", "10.0.0.1", 1001, true, nil, "uid 1001, not of the job's user (uid 1000)", false},
		{"loopback, no socket found", "127.0.0.1", 0, false, nil, "a local connection whose socket has gone", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nc := fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(tt.from), Port: 5000}, local: &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 29500}}
			owner := func(net.Conn) (uint32, bool, error) { return tt.uid, tt.found, nil }
			asked := false
			remote := func(client, server netip.AddrPort) error {
				asked = true
				if client.String() != tt.from+":5000" || server.String() != "10.0.0.1:29500" {
					t.Errorf("asked about %s -> %s", client, server)
				}
				return tt.remote
			}
			err := u.allowed(nc, owner, local, remote)
			if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("got %v, want %q", err, tt.err)
			}
			if asked != tt.asked {
				t.Fatalf("asked the other node: %v, want %v", asked, tt.asked)
			}
		})
	}
}

// All of an agent's TCPStores together stay within its budget, and the
// log names the job whose write went past it.
func TestTorchStoresShareABudget(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	a := torchAgent(t, "127.0.0.1", 3<<20, zap.New(core))
	var clients []*tcpstore.Client
	for _, job := range []string{"j-one", "j-two"} {
		c, err := dialAs(os.Geteuid(), serveJob(t, a, job, uint32(os.Geteuid()), "127.0.0.1"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	mib := make([]byte, 1<<20-16)
	for i := range 2 {
		if err := clients[0].Set("k"+strconv.Itoa(i), mib); err != nil {
			t.Fatal(err)
		}
	}
	if err := clients[1].Set("k0", mib); err != nil {
		t.Fatal(err)
	}
	// A SET has no reply: a GET on each connection makes sure the store
	// holds its three MiB before the fourth.
	for i, c := range clients {
		if _, err := c.Get("k0"); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	// The third MiB of one job is the fourth of the agent's.
	// A SET has no reply: the store closes the connection instead.
	clients[1].Set("k1", mib)
	if _, err := clients[1].Get("k0"); err == nil {
		t.Fatal("the stores took more than their budget")
	}
	if used := a.torchBytes.Used(); used > 3<<20 {
		t.Fatalf("the stores hold %d bytes, more than 3 MiB", used)
	}
	closed := func() []observer.LoggedEntry {
		return logs.FilterMessage("TCPStore connection closed").FilterField(zap.String("job", "j-two")).All()
	}
	testwait.UntilShowing(t, 10*time.Second, "a line naming the job", func() bool { return len(closed()) > 0 },
		func() string { return fmt.Sprint(logs.All()) })
	if msg := closed()[0].ContextMap()["error"]; !strings.Contains(msg.(string), "this agent's TCPStores hold 3145728 bytes") {
		t.Fatalf("the log says %q", msg)
	}
}

// fakeConn is a connection from remote, for the rules alone.
type fakeConn struct {
	net.Conn
	remote, local net.Addr
}

func (c fakeConn) LocalAddr() net.Addr { return c.local }

func (c fakeConn) RemoteAddr() net.Addr { return c.remote }
