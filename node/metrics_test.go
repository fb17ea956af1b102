package node_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/gpu"
	"github.com/musterhq/muster/node"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/tcpstore"
	"github.com/musterhq/muster/testwait"
)

// scrape gets /metrics and parses it with Prometheus' own text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value is the value of family's series with labels (name=value pairs),
// and whether there is one.
func value(fams map[string]*dto.MetricFamily, family string, labels ...string) (float64, bool) {
	f := fams[family]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.GetSummary() != nil:
			return float64(m.GetSummary().GetSampleCount()), true
		}
	}
	return 0, false
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// runJob submits spec and follows it to its end.
func runJob(t *testing.T, c interface {
	Submit(context.Context, *musterv1.SubmitRequest, ...grpc.CallOption) (*musterv1.SubmitResponse, error)
	WatchJob(context.Context, *musterv1.WatchJobRequest, ...grpc.CallOption) (musterv1.Jobs_WatchJobClient, error)
}, spec *musterv1.JobSpec) *musterv1.JobFinished {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: resp.JobId})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("job %s: %v", resp.JobId, err)
		}
		if fin := ev.GetFinished(); fin != nil {
			return fin
		}
	}
}

// Every node serves its metrics and probes; the one hosting the store
// serves the store's counts too, which jobs run to their end move.
func TestMetricsAndProbes(t *testing.T) {
	t.Parallel()
	gpus := []gpu.Device{{Index: 0, Name: "declared"}, {Index: 1, Name: "declared"}}
	head := startNode(t, node.Config{Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		Agent: agent.Config{Name: "n0", Rank: -1, GPUs: gpus}})
	worker := startNode(t, node.Config{Gossip: &node.Gossip{Join: []string{head.Gossip().Addr()}}, MetricsAddr: "127.0.0.1:0",
		Agent: agent.Config{Name: "n1", Rank: -1, GPUs: gpus}})
	noGPUs := startNode(t, node.Config{Gossip: &node.Gossip{Join: []string{head.Gossip().Addr()}}, MetricsAddr: "127.0.0.1:0",
		Agent: agent.Config{Name: "n2", Rank: -1, GPUError: "nvml: library not found"}, GPUsExpected: "/dev/nvidia0 exists"})

	c := rendezvoustest.NewClient(t, head.Store(), security.Security{Token: testToken})
	argv := func(script string) [][]byte { return [][]byte{[]byte("sh"), []byte("-c"), []byte(script)} }
	if fin := runJob(t, c, &musterv1.JobSpec{Argv: argv("true"), Nnodes: 2, Gpus: 2, Nproc: 2}); fin.GetState() != musterv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("first job: %v", fin)
	}
	if fin := runJob(t, c, &musterv1.JobSpec{Argv: argv("exit 3"), Nnodes: 1, Gpus: 1, Nproc: 1}); fin.GetExitCode() != 3 {
		t.Fatalf("second job: %v", fin)
	}

	fams := scrape(t, head.MetricsAddr())
	for _, tc := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"muster_jobs_finished_total", []string{"result", "succeeded"}, 1},
		{"muster_jobs_finished_total", []string{"result", "worker_failed"}, 1},
		{"muster_jobs_finished_total", []string{"result", "node_lost"}, 0},
		{"muster_jobs", []string{"state", "succeeded"}, 1},
		{"muster_jobs", []string{"state", "failed"}, 1},
		{"muster_jobs", []string{"state", "running"}, 0},
		{"muster_worker_exits_total", []string{"cause", "exited"}, 4},
		{"muster_worker_exits_total", []string{"cause", "exit_code"}, 1},
		{"muster_job_submit_to_start_seconds", nil, 2},
		{"muster_rendezvous_round_seconds", nil, 2},
		{"muster_job_restarts_total", nil, 0},
		{"muster_nodes", []string{"state", "idle"}, 3},
		{"muster_node_gpus", []string{"node", "n1"}, 2},
		{"muster_node_gpus_free", []string{"node", "n1"}, 2},
		{"muster_node_gpus", []string{"node", "n2"}, 0},
		{"muster_agent_ready", nil, 1},
		{"muster_build_info", nil, 1},
	} {
		if got, ok := value(fams, tc.family, tc.labels...); !ok || got != tc.want {
			t.Errorf("%s%v = %v (found %v), want %v", tc.family, tc.labels, got, ok, tc.want)
		}
	}
	var gossip []string
	for name := range fams {
		if strings.HasPrefix(name, "muster_memberlist_") {
			gossip = append(gossip, name)
		}
	}
	if len(gossip) == 0 {
		t.Error("no muster_memberlist_ metrics: memberlist's own metrics are not exported")
	}

	// A node that does not host the store has no store counts.
	wfams := scrape(t, worker.MetricsAddr())
	if _, ok := wfams["muster_jobs_finished_total"]; ok {
		t.Error("a node that does not host the store serves muster_jobs_finished_total")
	}
	if v, ok := value(wfams, "muster_agent_ready"); !ok || v != 1 {
		t.Errorf("worker muster_agent_ready = %v (found %v), want 1", v, ok)
	}

	for _, n := range []*node.Node{head, worker} {
		if code, body := get(t, "http://"+n.MetricsAddr()+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz of a ready node: %d %s", code, body)
		}
		if code, _ := get(t, "http://"+n.MetricsAddr()+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d", code)
		}
	}
	code, body := get(t, "http://"+noGPUs.MetricsAddr()+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no GPUs seen, though /dev/nvidia0 exists: nvml: library not found") {
		t.Errorf("/readyz of a node without GPUs: %d %q, want 503 naming the GPUs", code, body)
	}

	// A running job: its node serves its TCPStore, which holds a client's
	// connection and key.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: argv(`echo "port $MASTER_PORT"; exec sleep 100`),
		Nnodes: 1, Gpus: 1, Nproc: 1, KillTimeoutMs: 200}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: resp.JobId})
	if err != nil {
		t.Fatal(err)
	}
	var port string
	for port == "" {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if o := ev.GetOutput(); o != nil {
			port = strings.TrimSpace(strings.TrimPrefix(string(o.GetData()), "port "))
		}
	}
	addr := "127.0.0.1:" + port
	ts, err := tcpstore.Dial(ctx, addr)
	if err != nil {
		t.Fatalf("TCPStore at %s: %v", addr, err)
	}
	defer ts.Close()
	if err := ts.Set("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Summed over the nodes: the last jobs' runs and TCPStores end
	// shortly after the jobs do.
	sum := func(family string) float64 {
		total := 0.0
		for _, n := range []*node.Node{head, worker, noGPUs} {
			v, _ := value(scrape(t, n.MetricsAddr()), family)
			total += v
		}
		return total
	}
	want := map[string]float64{"muster_agent_jobs": 1, "muster_tcpstore_servers": 1, "muster_tcpstore_connections": 1, "muster_tcpstore_keys": 1}
	got := map[string]float64{}
	testwait.UntilShowing(t, 10*time.Second, fmt.Sprintf("the nodes to report %v while one job runs, its TCPStore holding a connection and a key", want),
		func() bool {
			for family := range want {
				got[family] = sum(family)
			}
			return maps.Equal(got, want)
		}, func() string { return fmt.Sprint(got) })
	fams = scrape(t, head.MetricsAddr())
	if v, _ := value(fams, "muster_jobs", "state", "running"); v != 1 {
		t.Errorf("muster_jobs{state=running} = %v while the job runs, want 1", v)
	}
	if v, _ := value(fams, "muster_nodes", "state", "busy"); v != 1 {
		t.Errorf("muster_nodes{state=busy} = %v while the job runs, want 1", v)
	}
	if _, err := c.Cancel(ctx, &musterv1.CancelRequest{JobId: resp.JobId}); err != nil {
		t.Fatal(err)
	}

	// gRPC health, without a token: on the metrics port in plain text (as
	// Kubernetes' gRPC probe asks), from the node's readiness, and on the
	// store's port.
	for _, tc := range []struct {
		addr string
		want healthpb.HealthCheckResponse_ServingStatus
	}{
		{head.MetricsAddr(), healthpb.HealthCheckResponse_SERVING},
		{noGPUs.MetricsAddr(), healthpb.HealthCheckResponse_NOT_SERVING},
		{head.Store().Addr(), healthpb.HealthCheckResponse_SERVING},
	} {
		conn, err := grpc.NewClient(tc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		conn.Close()
		if err != nil || resp.GetStatus() != tc.want {
			t.Errorf("gRPC health of %s: %v, %v; want %v", tc.addr, resp.GetStatus(), err, tc.want)
		}
	}
}

// A node is unready for want of GPUs only when it expected some: a CPU
// node without NVIDIA's library is ready.
func TestReadyWithoutGPUs(t *testing.T) {
	t.Parallel()
	declared := []gpu.Device{{Index: 0, Name: "declared"}}
	for _, tc := range []struct {
		name     string
		gpus     []gpu.Device
		gpuError string
		expected string
		code     int
		body     string
	}{
		{"cpu node without nvml", nil, "nvml: ERROR_LIBRARY_NOT_FOUND", "", http.StatusOK, "ok"},
		{"cpu node, nvml finds none", nil, "", "", http.StatusOK, "ok"},
		{"gpus asked, nvml missing", nil, "nvml: ERROR_LIBRARY_NOT_FOUND", "8 GPUs per node were asked for", http.StatusServiceUnavailable,
			"no GPUs seen, though 8 GPUs per node were asked for: nvml: ERROR_LIBRARY_NOT_FOUND"},
		{"device files, none found", nil, "", "/dev/nvidia0 exists", http.StatusServiceUnavailable,
			"no GPUs seen, though /dev/nvidia0 exists: none found"},
		{"gpus declared", declared, "", "/dev/nvidia0 exists", http.StatusOK, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := startNode(t, node.Config{Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", GPUsExpected: tc.expected,
				Agent: agent.Config{Name: "n0", Rank: -1, GPUs: tc.gpus, GPUError: tc.gpuError}})
			code, body := get(t, "http://"+n.MetricsAddr()+"/readyz")
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("/readyz: %d %q, want %d %q", code, body, tc.code, tc.body)
			}
		})
	}
}
