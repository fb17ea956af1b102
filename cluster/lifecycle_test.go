package cluster

import (
	"context"
	"net"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics"

	"github.com/musterhq/muster/testwait"
)

// routedSinks is how many members' metrics the router delivers.
func routedSinks() int {
	router.mu.Lock()
	defer router.mu.Unlock()
	return len(router.sinks)
}

// A failed Start leaves no route for its metrics and no goroutine of its
// own; a started member's Close twice is Close once, and closes Events.
func TestLifecycle(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	tests := []struct {
		name     string
		bindPort int
		fails    bool
	}{
		{"port taken", port, true},
		{"started", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := routedSinks()
			c, err := Start(context.Background(), Config{Name: "a", Token: testToken, Profile: Local, BindAddr: "127.0.0.1",
				BindPort: tt.bindPort, MetricSink: &gometrics.BlackholeSink{}})
			if (err != nil) != tt.fails {
				t.Fatalf("Start: %v, want failure %v", err, tt.fails)
			}
			if c != nil {
				for i := range 2 {
					if err := c.Close(); err != nil && i == 0 {
						t.Fatalf("Close: %v", err)
					}
				}
				select {
				case _, ok := <-c.Events():
					for ok {
						_, ok = <-c.Events()
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Events not closed after Close")
				}
			}
			if n := routedSinks(); n != before {
				t.Errorf("%d metric routes, want %d", n, before)
			}
			testwait.GoroutinesGone(t, 10*time.Second, "github.com/musterhq/muster/cluster.")
		})
	}
}
