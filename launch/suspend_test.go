package launch

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// stoppable forwards TCP connections to a store, and can stop forwarding
// as a stopped process stops reading: its kernel still takes and
// acknowledges what fits in its buffers, and answers keepalive probes.
type stoppable struct {
	lis     net.Listener
	mu      sync.Mutex
	stopped bool
	resumed *sync.Cond
}

func newStoppable(t *testing.T, to string) *stoppable {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stoppable{lis: l}
	p.resumed = sync.NewCond(&p.mu)
	t.Cleanup(func() { l.Close(); p.set(false) })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			go p.pipe(c, s)
			go p.pipe(s, c)
		}
	}()
	return p
}

func (p *stoppable) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.stopped {
			p.resumed.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stoppable) set(stopped bool) {
	p.mu.Lock()
	p.stopped = stopped
	p.mu.Unlock()
	p.resumed.Broadcast()
}

// A launcher suspended (Ctrl-Z) on another machine than the store keeps its
// job: its kernel still answers TCP, so the store keeps its stream, however
// long the launcher stays stopped beyond the store's bound on a dead peer
// and its grace for a launcher that went away; when it resumes, the job
// goes on and ends as it would have. (A store that pinged its peers, as it
// did, dropped the stream within its ping bounds and stopped the job.)
func TestSuspendedLauncherKeepsItsClusterJob(t *testing.T) {
	t.Parallel()
	// The store's bounds, short for the test: a launcher that went away
	// loses its job detachGrace after the store dropped its stream.
	const deadPeer, detachGrace = 3 * time.Second, time.Second
	store := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.DeadPeerAfter, c.DetachGrace = deadPeer, detachGrace })
	tc := &agenttest.Cluster{Store: store}
	tc.AddAgent(t, nil)
	proxy := newStoppable(t, store.Addr())
	// A launcher that sends no keepalive pings of its own, as a stopped one
	// cannot.
	c, err := storeclient.DialInProcess(proxy.lis.Addr().String(), rendezvoustest.Security(store))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := t.TempDir()
	script := fmt.Sprintf(`echo before; while [ ! -e %s/go ]; do sleep 0.05; done; seq 1 20000; echo end`, dir)
	var stdout, stderr testfixture.Buffer
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := Run(context.Background(), zaptest.NewLogger(t), c, Options{
			Spec:   &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte(script)}, Nnodes: 1, Nproc: 1, KillTimeoutMs: 1000},
			Stdout: &stdout, Stderr: &stderr, Store: store.Addr(),
		})
		done <- result{code, err}
	}()
	testwait.UntilShowing(t, 20*time.Second, "the job to start",
		func() bool { return strings.Contains(stdout.String(), "before") }, stderr.String)
	proxy.set(true)
	// Stopped past the bound on a dead peer (rounded up to whole seconds of
	// TCP keepalive) and the grace for a launcher that went away.
	select {
	case r := <-done:
		t.Fatalf("the job ended while its launcher was stopped: exit %d, %v; stderr:\n%s", r.code, r.err, stderr.String())
	case <-time.After(2*deadPeer + detachGrace + 2*time.Second):
	}
	proxy.set(false)
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	select {
	case r := <-done:
		if r.err != nil || r.code != 0 {
			t.Fatalf("exit %d, %v; stderr:\n%s", r.code, r.err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the launcher did not end; stderr:\n%s", stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "\n20000\nend\n") || strings.Count(out, "\n") != 20002 {
		t.Errorf("output incomplete: %d lines; stderr:\n%s", strings.Count(out, "\n"), stderr.String())
	}
}
