package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/musterhq/muster/metrics"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// BenchmarkScrape is one scrape of /metrics over HTTP, as Prometheus makes
// it, of a store holding 100 registered nodes of 8 GPUs and the 1,000 ended
// jobs it keeps, with every store counter and histogram in use.
func BenchmarkScrape(b *testing.B) {
	const nodes, jobs = 100, 1000
	reg := metrics.NewRegistry("bench", "unknown")
	rec := metrics.NewStoreRecorder(reg)
	store := rendezvous.NewStore(rendezvous.StoreConfig{Recorder: rec})
	b.Cleanup(store.Close)
	for i := range nodes {
		info := &musterv1.Node{Name: fmt.Sprintf("node%03d", i), Addr: "10.0.0.1", Rank: -1}
		for g := range 8 {
			info.Gpus = append(info.Gpus, &musterv1.GPU{Index: int32(g), Name: "H200"})
		}
		if _, err := store.Register(info, fmt.Sprintf("key%d", i), nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	// Jobs that wait for more nodes than there are, cancelled: each ends
	// at once, and the store keeps it among its ended jobs.
	for range jobs {
		id, err := store.Submit(&musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: nodes + 1, WaitTimeoutMs: 60_000}, nil, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.Cancel(id, true, "bench", 1); err != nil {
			b.Fatal(err)
		}
	}
	reg.MustRegister(metrics.NewStoreCollector(store.Stats))
	if got := store.Stats().Jobs[musterv1.JobState_JOB_STATE_CANCELLED]; got != jobs {
		b.Fatalf("store holds %d ended jobs, want %d", got, jobs)
	}
	srv, err := metrics.Start(metrics.ServerConfig{Addr: "127.0.0.1:0", Gatherer: reg, Ready: func() error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	url := "http://" + srv.Addr() + "/metrics"
	var size int
	b.ResetTimer()
	for b.Loop() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("scrape: %v %s", err, resp.Status)
		}
		size = len(body)
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}
