package agent_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/storeserver"
)

// slowPath forwards TCP connections to target, every byte delay later than
// it came, in order: a path whose round trip is twice delay, as on a lossy
// link where TCP retransmits. It stops when the test ends.
func slowPath(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type chunk struct {
		data []byte
		at   time.Time
	}
	forward := func(dst, src net.Conn) {
		defer dst.Close()
		q := make(chan chunk, 1024)
		go func() {
			defer close(q)
			for {
				buf := make([]byte, 32<<10)
				n, err := src.Read(buf)
				if n > 0 {
					q <- chunk{buf[:n], time.Now().Add(delay)}
				}
				if err != nil {
					return
				}
			}
		}()
		for c := range q {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.data); err != nil {
				io.Copy(io.Discard, src)
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go forward(s, c)
			go forward(c, s)
		}
	}()
	return ln.Addr().String()
}

// A store answered slowly is no lost store: a lease renewal answered 2.4 s
// after it was sent, longer than a renewal once waited (2 s), still renews
// the lease from the time it was sent, and the node's job runs on past the
// fence bound to its end.
func TestSlowRenewalsKeepTheLease(t *testing.T) {
	t.Parallel()
	const fence = 12 * time.Second
	store := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.FenceAfter = fence })
	tc := &agenttest.Cluster{Store: store, Client: rendezvoustest.NewClient(t, store, rendezvoustest.Security(store))}
	slow := slowPath(t, store.Addr(), 1200*time.Millisecond)
	tc.AddAgent(t, func(cfg *agent.Config) { cfg.StoreAddr = slow })
	out, fin := follow(t, tc, &musterv1.JobSpec{
		Argv: args("sh", "-c", "sleep 12; echo done"), Nnodes: 1, Nproc: 1, KillTimeoutMs: 1000})
	if fin.GetExitCode() != 0 || len(out[0]) != 1 || out[0][0] != "done" {
		t.Fatalf("job ended with %d (%s), output %q", fin.GetExitCode(), fin.GetSummary(), out)
	}
}
