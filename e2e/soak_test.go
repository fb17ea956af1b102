package e2e

import (
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The replicated store's soak: jobs started without pause on 20 hosts for
// MUSTER_E2E_SOAK (a duration, e.g. 10m) while the leader's agent is killed
// every minute and started again: no job is lost. Off unless MUSTER_E2E_SOAK
// is set; bench/RESULTS.md has its figures.
func TestNetnsReplicaSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("MUSTER_E2E_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("MUSTER_E2E_SOAK=DURATION runs the soak")
	}
	r := startReplicated(t, 23)
	workers := r.hosts[3:]
	end := time.Now().Add(d)
	var started, succeeded atomic.Int64
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				a, b := workers[rand.IntN(len(workers))], workers[rand.IntN(len(workers))]
				hosts := a.name
				if a != b {
					hosts += "," + b.name
				}
				started.Add(1)
				res := r.runOn(workers[i%len(workers)], "run", "-H", hosts, "--", "sh", "-c", "sleep 1.$RANDOM; exit 0")
				if res.code == 0 {
					succeeded.Add(1)
					continue
				}
				mu.Lock()
				failures = append(failures, strings.TrimSpace(res.stderr))
				mu.Unlock()
			}
		}()
	}
	kills := 0
	for time.Now().Add(time.Minute).Before(end) {
		time.Sleep(time.Minute)
		leader := r.leader()
		if leader == "" {
			t.Errorf("no replica leads after %d kills", kills)
			break
		}
		h := r.host(leader)
		kill9(t, r.replicas[leader])
		kills++
		time.Sleep(5 * time.Second)
		r.replicas[leader] = r.startAgent(h, h.name, r.replicaArgs(h, r.replicaAddrs())...)
	}
	wg.Wait()
	t.Logf("soak %s: %d jobs started, %d succeeded, %d failed; the leader killed %d times", d, started.Load(), succeeded.Load(), len(failures), kills)
	for _, f := range failures {
		t.Errorf("job lost: %s", f)
	}
}
