package node_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/node"
	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// freePort is a loopback address whose port was free a moment ago.
func freePort(t *testing.T) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testfixture.FreePort(t)))
}

// A Start that fails after it hosted the store (its agent refused) gives
// back the store's port and socket, the gossip and metrics ports, and
// leaves no goroutine of muster's.
func TestFailedStartLeavesNothing(t *testing.T) {
	tests := []struct {
		name   string
		gossip bool
		join   string
	}{
		{"hosting, its agent refused", false, ""},
		{"hosting and gossiping, its agent refused", true, ""},
		{"hosting and joining", false, "127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := node.Config{Logger: zaptest.NewLogger(t), Listen: freePort(t), Join: tt.join,
				Socket: filepath.Join(t.TempDir(), "store.sock"), SocketRequired: true, MetricsAddr: freePort(t),
				Agent: agent.Config{Name: "n0", Addr: "not-an-ip", Rank: -1, TempDir: t.TempDir()}}
			cfg.Security.Token = testToken
			gossipAddr := ""
			if tt.gossip {
				gossipAddr = freePort(t)
				cfg.Gossip = &node.Gossip{Bind: gossipAddr, Profile: cluster.Local}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if n, err := node.Start(ctx, cfg); err == nil {
				n.Close(0)
				t.Fatal("started")
			}
			testwait.GoroutinesGone(t, 10*time.Second, "github.com/musterhq/muster/")
			for _, addr := range []string{cfg.Listen, cfg.MetricsAddr, gossipAddr} {
				if addr == "" {
					continue
				}
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatalf("port %s still held: %v", addr, err)
				}
				l.Close()
			}
			l, err := net.Listen("unix", cfg.Socket)
			if err != nil {
				t.Fatalf("socket still held: %v", err)
			}
			l.Close()
		})
	}
}

// Close twice is Close once, and Err is closed after it.
func TestCloseTwiceClosesErr(t *testing.T) {
	tests := []struct {
		name string
		cfg  node.Config
	}{
		{"hosting", node.Config{Listen: "127.0.0.1:0", Socket: filepath.Join(t.TempDir(), "sock"), SocketRequired: true}},
		{"joining", node.Config{}},
	}
	head := startNode(t, tests[0].cfg)
	tests[0].cfg.Socket = filepath.Join(t.TempDir(), "sock2")
	tests[1].cfg.Gossip = &node.Gossip{Join: []string{head.Gossip().Addr()}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Logger = zaptest.NewLogger(t)
			cfg.Agent = agent.Config{Name: "c" + string(rune('0'+i)), Rank: -1}
			if cfg.Listen != "" {
				// A store of its own, in a gossip cluster of its own.
				cfg.Gossip = &node.Gossip{}
			}
			n := startNode(t, cfg)
			for range 2 {
				if err := n.Close(0); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err, ok := <-n.Err():
				if ok {
					t.Fatalf("Err delivered %v after Close, want it closed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Err not closed after Close")
			}
		})
	}
}
