package node_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/node"
	"github.com/musterhq/muster/security"
)

// Two stores started at once, each joining the other, leave one store, not
// none: the node whose name sorts first keeps its store (or the one that
// came up first), the other is refused naming it.
func TestStoresStartedTogether(t *testing.T) {
	t.Parallel()
	names := []string{"s1", "s0"} // the later name first: the order of the starts decides nothing
	ports := []int{freeGossipPort(t), freeGossipPort(t)}
	type started struct {
		n   *node.Node
		err error
	}
	done := make([]chan started, len(names))
	for i, name := range names {
		done[i] = make(chan started, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n, err := node.Start(ctx, node.Config{Listen: "127.0.0.1:0", Socket: filepath.Join(t.TempDir(), "sock"), SocketRequired: true,
				Security: security.Security{Token: testToken},
				Gossip: &node.Gossip{Bind: "127.0.0.1:" + strconv.Itoa(ports[i]), Profile: cluster.Local,
					Join: []string{"127.0.0.1:" + strconv.Itoa(ports[1-i])}},
				Agent: agent.Config{Name: name, Rank: -1, TempDir: t.TempDir()}})
			done[i] <- started{n, err}
		}()
	}
	// At once, s0 keeps its store; on a loaded machine one may come up well
	// before the other and keep its own: either way exactly one is left,
	// and the other is refused naming it.
	results := map[string]started{}
	for i, name := range names {
		s := <-done[i]
		if s.n != nil {
			t.Cleanup(func() { s.n.Close(time.Second) })
		}
		results[name] = s
	}
	kept, gone := "s0", "s1"
	if results["s0"].err != nil {
		kept, gone = "s1", "s0"
	}
	if err := results[kept].err; err != nil {
		t.Errorf("%s: %v, want one store kept", kept, err)
	}
	if err := results[gone].err; err == nil || !strings.Contains(err.Error(), "this gossip cluster has a store already, hosted by node "+kept) {
		t.Errorf("%s: %v, want refused naming %s", gone, err, kept)
	}
}

// freeGossipPort is a loopback port free for both UDP and TCP, for now.
func freeGossipPort(t *testing.T) int {
	t.Helper()
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", l.Addr().String())
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free loopback port for TCP and UDP")
	return 0
}
