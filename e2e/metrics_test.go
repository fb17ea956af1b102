package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// curlIn gets url with curl from inside h's namespace: its status code and
// body.
func curlIn(t *testing.T, h *host, url string) (int, string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", h.ns, "curl", "-sS", "--max-time", "5", "-w", "\n%{http_code}", url).Output()
	if err != nil {
		t.Fatalf("curl %s in %s: %v", url, h.name, err)
	}
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	code, err := strconv.Atoi(s[i+1:])
	if err != nil {
		t.Fatalf("curl %s: no status code in %q", url, s)
	}
	return code, s[:i]
}

// scrapeIn curls /metrics at addr from h and parses it with Prometheus' own
// text parser.
func scrapeIn(t *testing.T, h *host, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := curlIn(t, h, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics of %s: %d %s", addr, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics of %s does not parse: %v\n%s", addr, err, body)
	}
	return fams
}

// metricValue is the counter's or gauge's value of family's series with
// the label name=value (or its only series), and whether there is one.
func metricValue(fams map[string]*dto.MetricFamily, family, name, value string) (float64, bool) {
	for _, m := range fams[family].GetMetric() {
		match := name == ""
		for _, l := range m.GetLabel() {
			match = match || l.GetName() == name && l.GetValue() == value
		}
		if !match {
			continue
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// Real agents on three hosts serve /metrics, /healthz and /readyz: the
// head's metrics count the jobs run and the node lost, with how long it
// took to find; every agent's parse with Prometheus' parser; and an agent
// that lost its store says so on /readyz.
func TestNetnsMetrics(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	a, b, c := nw.hosts[0], nw.hosts[1], nw.hosts[2]
	aMetrics, bMetrics := a.ip+":29401", b.ip+":29401"
	head := nw.startAgent(a, a.name, "--listen", nw.store(), "--token-file", nw.token,
		"--tls-cert", filepath.Join(nw.dir, "store.pem"), "--tls-key", filepath.Join(nw.dir, "store-key.pem"),
		"--tls-ca", nw.ca, "--socket", filepath.Join(nw.dir, "store.sock"), "--gpu-devices", "0,1", "--metrics-addr", aMetrics,
		"--node-timeout", "2s")
	for _, h := range []*host{b, c} {
		nw.startAgent(h, h.name, "--join", a.ip, "--token-file", nw.token, "--tls-ca", nw.ca, "--gpu-devices", "0,1",
			"--metrics-addr", ":29401", "--node-timeout", "2s")
	}
	nw.waitReady(3, 20*time.Second)

	finished := func(result string) float64 {
		v, ok := metricValue(scrapeIn(t, b, aMetrics), "muster_jobs_finished_total", "result", result)
		if !ok {
			t.Fatalf("no muster_jobs_finished_total{result=%q}", result)
		}
		return v
	}
	succeeded, failed := finished("succeeded"), finished("worker_failed")
	if r := nw.run("run", "-n", "2", "--nproc", "2", "--", "true"); r.code != 0 {
		t.Fatalf("job: exit %d: %s", r.code, r.stderr)
	}
	if r := nw.run("run", "-n", "1", "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Fatalf("failing job: exit %d, want 3: %s", r.code, r.stderr)
	}
	if got := finished("succeeded") - succeeded; got != 1 {
		t.Errorf("muster_jobs_finished_total{result=succeeded} rose by %v, want 1", got)
	}
	if got := finished("worker_failed") - failed; got != 1 {
		t.Errorf("muster_jobs_finished_total{result=worker_failed} rose by %v, want 1", got)
	}

	fams := scrapeIn(t, a, aMetrics)
	for _, tc := range []struct {
		family, label, value string
		want                 float64
	}{
		{"muster_nodes", "state", "idle", 3},
		{"muster_node_gpus", "node", "b", 2},
		{"muster_node_gpus_free", "node", "b", 2},
		{"muster_jobs", "state", "running", 0},
		{"muster_agent_ready", "", "", 1},
	} {
		if got, ok := metricValue(fams, tc.family, tc.label, tc.value); !ok || got != tc.want {
			t.Errorf("%s{%s=%q} = %v (found %v), want %v", tc.family, tc.label, tc.value, got, ok, tc.want)
		}
	}
	if _, ok := fams["muster_build_info"]; !ok {
		t.Error("no muster_build_info")
	}
	bfams := scrapeIn(t, a, bMetrics)
	if _, ok := bfams["muster_memberlist_msg_alive_total"]; !ok {
		t.Error("b serves no muster_memberlist_msg_alive_total: memberlist's metrics are missing")
	}
	for _, h := range []*host{a, b} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := curlIn(t, h, "http://"+h.ip+":29401"+path); code != 200 {
				t.Errorf("%s of %s: %d %s", path, h.name, code, body)
			}
		}
	}

	// c cut off: the store finds it lost, and how long it was silent.
	var causes []string
	lost := func() (n float64, detections uint64) {
		fams := scrapeIn(t, b, aMetrics)
		causes = causes[:0]
		for _, m := range fams["muster_nodes_lost_total"].GetMetric() {
			n += m.GetCounter().GetValue()
			if v := m.GetCounter().GetValue(); v > 0 {
				causes = append(causes, fmt.Sprintf("%s=%v", m.GetLabel()[0].GetValue(), v))
			}
		}
		for _, m := range fams["muster_node_loss_detection_seconds"].GetMetric() {
			detections += m.GetHistogram().GetSampleCount()
		}
		return n, detections
	}
	if n, d := lost(); n != 0 || d != 0 {
		t.Fatalf("%v nodes lost, %d detections timed before any was", n, d)
	}
	nw.cut(c)
	var n float64
	var d uint64
	testwait.UntilShowing(t, 40*time.Second, "c, cut off, to be lost and its detection timed", func() bool {
		n, d = lost()
		return n != 0 && d != 0
	}, func() string { return fmt.Sprintf("%v nodes lost (%v), %d detection times", n, causes, d) })
	if n != 1 || d != 1 {
		t.Errorf("c cut off: %v nodes lost (%v), %d detection times; want 1 and 1", n, causes, d)
	}
	if v, _ := metricValue(scrapeIn(t, b, aMetrics), "muster_nodes", "state", "idle"); v != 2 {
		t.Errorf("muster_nodes{state=idle} = %v after c's loss, want 2", v)
	}

	// The store gone, b is alive but not ready, and says why.
	kill9(t, head)
	testwait.Until(t, 20*time.Second, "b's /readyz to say it lost its store", func() bool {
		code, body := curlIn(t, b, "http://"+bMetrics+"/readyz")
		return code == 503 && strings.Contains(body, "not registered with the store")
	})
	if code, _ := curlIn(t, b, "http://"+bMetrics+"/healthz"); code != 200 {
		t.Errorf("/healthz of b without its store: %d, want 200", code)
	}
}

// httpGet gets url: its status code and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// An agent on a node without GPUs, or without NVIDIA's library, that was
// not asked for GPUs is ready: the daemon, and agent run --gpus 0 running a
// CPU job. Only a node that expected GPUs is unready without them.
func TestReadyzWithoutGPUs(t *testing.T) {
	t.Parallel()
	if files, _ := filepath.Glob("/dev/nvidia[0-9]*"); len(files) > 0 {
		t.Skipf("%s: this node has GPUs, so its daemon expects them", files[0])
	}
	t.Run("daemon", func(t *testing.T) {
		t.Parallel()
		addr := "127.0.0.1:" + strconv.Itoa(testfixture.FreePort(t))
		startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--metrics-addr", addr})
		if code, body := httpGet(t, "http://"+addr+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz: %d %s", code, body)
		}
	})
	t.Run("agent run --gpus 0", func(t *testing.T) {
		t.Parallel()
		addr := "127.0.0.1:" + strconv.Itoa(testfixture.FreePort(t))
		cmd := exec.Command(agentBin, "run", "--rdzv", "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), "--nnodes", "1", "--gpus", "0",
			"--metrics-addr", addr, "--kill-timeout", "1s", "--", "sh", "-c", "echo started; exec sleep 60")
		cmd.Env = agentEnv("TMPDIR=" + t.TempDir())
		var out, errb testfixture.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stopAtCleanup(t, cmd, "agent run", errb.String)
		testwait.Until(t, 20*time.Second, "the CPU job to start", func() bool { return strings.Contains(out.String(), "started") })
		if code, body := httpGet(t, "http://"+addr+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz: %d %s", code, body)
		}
	})
}
