package storeserver_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/testwait"
)

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l := listen(t)
	defer l.Close()
	return l.Addr().String()
}

// A failed Start gives back what it took: its own listener's port, its
// socket, its goroutines; a listener it was given stays open, its caller's.
func TestFailedStartLeavesNothing(t *testing.T) {
	// A socket under a file cannot be made.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	noDir := filepath.Join(file, "store.sock")
	tests := []struct {
		name  string
		given bool   // a Listener given, rather than ListenAddr
		sock  string // the socket asked for
		peers bool   // a replica without its data directory
	}{
		{"own listener, socket refused", false, noDir, false},
		{"given listener, socket refused", true, noDir, false},
		{"own listener, replica refused", false, "", true},
		{"given listener and socket, replica refused", true, filepath.Join(t.TempDir(), "store.sock"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := storeserver.Config{Logger: zaptest.NewLogger(t), Socket: tt.sock, Security: security.Security{Token: token}}
			var given net.Listener
			if tt.given {
				given = listen(t)
				defer given.Close()
				cfg.Listener = given
			} else {
				cfg.ListenAddr = freeAddr(t)
			}
			addr := cfg.ListenAddr
			if given != nil {
				addr = given.Addr().String()
			}
			if tt.peers {
				cfg.Replicas = []string{addr, "127.0.0.1:1"}
			}
			if s, err := storeserver.Start(context.Background(), cfg); err == nil {
				s.Close()
				t.Fatal("started")
			}
			testwait.GoroutinesGone(t, 5*time.Second, "github.com/musterhq/muster/")
			if given != nil {
				// Still listening: a dial reaches its backlog.
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					t.Fatalf("the given listener was closed: %v", err)
				}
				c.Close()
			} else {
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatalf("the store's port is still held: %v", err)
				}
				l.Close()
			}
			if tt.sock != "" && tt.sock != noDir {
				l, err := net.Listen("unix", tt.sock)
				if err != nil {
					t.Fatalf("the socket is still held: %v", err)
				}
				l.Close()
			}
		})
	}
}

// Close twice is Close once, and Err is closed after it.
func TestCloseTwiceClosesErr(t *testing.T) {
	lis := listen(t)
	addr := lis.Addr().String()
	s, err := storeserver.Start(context.Background(), storeserver.Config{Logger: zaptest.NewLogger(t), Listener: lis,
		Socket: filepath.Join(t.TempDir(), "store.sock"), Security: security.Security{Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	select {
	case err, ok := <-s.Err():
		if ok {
			t.Fatalf("Err delivered %v after Close, want it closed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Err not closed after Close")
	}
	// The listener it was given is closed with it.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the store's port is still held after Close: %v", err)
	}
	l.Close()
}
