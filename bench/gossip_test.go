package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/cluster"
)

// BenchmarkGossip starts N in-process members with the LAN profile on 127.0.0.1, has all
// join the first at once and measures convergence (until every member sees N alive), then
// closes one member without a word (its transport stops answering) and measures how long the
// others take to declare it dead: the first of them, the median and the last.
// MUSTER_GOSSIP_NODES=8,32,100 picks the sizes.
func BenchmarkGossip(b *testing.B) {
	sizes := []int{8, 32, 100}
	if s := os.Getenv("MUSTER_GOSSIP_NODES"); s != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 2 {
				b.Fatalf("MUSTER_GOSSIP_NODES: %q", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			var conv, first, median, last time.Duration
			for range b.N {
				c, f, m, l := gossipTrial(b, n)
				conv, first, median, last = conv+c, first+f, median+m, last+l
			}
			per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
			b.ReportMetric(per(conv), "converge-s")
			b.ReportMetric(per(first), "detect-first-s")
			b.ReportMetric(per(median), "detect-p50-s")
			b.ReportMetric(per(last), "detect-all-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// joinsInFlight bounds the joins under way at once.
const joinsInFlight = 32

func gossipTrial(b *testing.B, n int) (converge, first, median, last time.Duration) {
	ms := make([]*cluster.Cluster, n)
	for i := range ms {
		c, err := cluster.Start(context.Background(), cluster.Config{
			Name: fmt.Sprintf("node-%03d", i), BindAddr: "127.0.0.1", Token: "bench",
			Profile: cluster.LAN, RejoinInterval: -1,
			Meta: cluster.Meta{GPUsTotal: 8, GPUsFree: 8, GRPCAddr: "127.0.0.1:29400", Version: "bench"},
		})
		if err != nil {
			b.Fatal(err)
		}
		ms[i] = c
	}
	defer func() {
		for _, m := range ms {
			_ = m.Close()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	// At most joinsInFlight joins at once: one seed answering hundreds of push-pulls at
	// the same instant times them out, which is not what a fleet booting does.
	inFlight := make(chan struct{}, joinsInFlight)
	for _, m := range ms[1:] {
		inFlight <- struct{}{}
		wg.Go(func() {
			defer func() { <-inFlight }()
			if _, err := m.Join([]string{ms[0].Addr()}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	deadline := start.Add(time.Minute)
	for _, m := range ms {
		for m.NumAlive() != n {
			if time.Now().After(deadline) {
				b.Fatalf("%s sees %d of %d members after a minute", m.Name(), m.NumAlive(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	converge = time.Since(start)

	victim := ms[n-1]
	observers := ms[:n-1]
	for _, m := range observers { // drain the join events
		for len(m.Events()) > 0 {
			<-m.Events()
		}
	}
	stopped := time.Now()
	_ = victim.Close()
	took := make([]time.Duration, len(observers))
	for i, m := range observers {
		wg.Go(func() {
			timeout := time.After(time.Minute)
			for {
				select {
				case e := <-m.Events():
					if e.Type == cluster.EventDead && e.Member.Name == victim.Name() {
						took[i] = e.At.Sub(stopped)
						return
					}
				case <-timeout:
					b.Errorf("%s: %s not declared dead in a minute", m.Name(), victim.Name())
					return
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(took)
	return converge, took[0], took[len(took)/2], took[len(took)-1]
}
