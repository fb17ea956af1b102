package agent_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/testwait"
)

// nvmlSession is an NVML that only counts its open sessions: what an agent
// holds of NVML while it runs.
type nvmlSession struct{ open atomic.Int32 }

func (n *nvmlSession) Open() error                          { n.open.Add(1); return nil }
func (n *nvmlSession) Close()                               { n.open.Add(-1) }
func (n *nvmlSession) Present() (map[int]string, error)     { return map[int]string{0: "GPU-0"}, nil }
func (n *nvmlSession) Memory(int) (gpu.MemoryHealth, error) { return gpu.MemoryHealth{}, nil }
func (n *nvmlSession) XIDs() ([]gpu.XID, error)             { return nil, nil }

// xidSource is an XID source that reports nothing and says when it closed.
type xidSource struct{ closed chan struct{} }

func (x *xidSource) Next(ctx context.Context) (gpu.XIDEvent, error) {
	select {
	case <-ctx.Done():
		return gpu.XIDEvent{}, ctx.Err()
	case <-x.closed:
		return gpu.XIDEvent{}, errors.New("closed")
	}
}
func (x *xidSource) Close() { close(x.closed) }

// A failed Start closes what the agent owns from the call (its GPU check's
// NVML session, its XID source) and leaves no goroutine of its own.
func TestFailedStartLeavesNothing(t *testing.T) {
	store := rendezvoustest.NewStore(t, nil)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	tests := []struct {
		name string
		edit func(*agent.Config)
	}{
		{"--addr not an IP", func(c *agent.Config) { c.Addr = "node-0" }},
		{"temp dir a file", func(c *agent.Config) { c.TempDir = file }},
		{"another token", func(c *agent.Config) { c.Security = security.Security{Token: "ffffffffffffffffffffffffffffffff"} }},
		{"no store", func(c *agent.Config) { c.StoreAddr = closed.Addr().String() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nvml := &nvmlSession{}
			devs := []gpu.Device{{Index: 0, UUID: "GPU-0"}}
			check := gpu.NewCheckerWith(devs, nvml)
			if err := check.Open(); err != nil {
				t.Fatal(err)
			}
			xids := &xidSource{closed: make(chan struct{})}
			cfg := agent.Config{Logger: zaptest.NewLogger(t), StoreAddr: store.Addr(), Security: rendezvoustest.Security(store),
				Name: "node-0", Addr: "127.0.0.2", Rank: -1, TempDir: t.TempDir(), GPUs: devs, GPUHealth: check, XIDs: xids}
			tt.edit(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if a, err := agent.Start(ctx, cfg); err == nil {
				a.Close(0)
				t.Fatal("started")
			}
			if n := nvml.open.Load(); n != 0 {
				t.Errorf("%d NVML sessions left open", n)
			}
			select {
			case <-xids.closed:
			default:
				t.Error("the XID source was left open")
			}
			testwait.GoroutinesGone(t, 10*time.Second, "github.com/musterhq/muster/agent.")
		})
	}
}

// Close twice is Close once, and closes what the agent owns.
func TestCloseTwice(t *testing.T) {
	store := rendezvoustest.NewStore(t, nil)
	nvml := &nvmlSession{}
	check := gpu.NewCheckerWith([]gpu.Device{{Index: 0, UUID: "GPU-0"}}, nvml)
	if err := check.Open(); err != nil {
		t.Fatal(err)
	}
	a, err := agent.Start(context.Background(), agent.Config{Logger: zaptest.NewLogger(t), StoreAddr: store.Addr(),
		Security: rendezvoustest.Security(store), Name: "node-0", Addr: "127.0.0.2", Rank: -1, TempDir: t.TempDir(), GPUHealth: check})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := a.Close(0); err != nil {
			t.Fatalf("Close %d: %v", i+1, err)
		}
	}
	if n := nvml.open.Load(); n != 0 {
		t.Errorf("%d NVML sessions left open", n)
	}
	testwait.GoroutinesGone(t, 10*time.Second, "github.com/musterhq/muster/agent.")
}
