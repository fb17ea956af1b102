package metrics_test

import (
	"strings"
	"testing"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/musterhq/muster/metrics"
)

// gather serves reg as /metrics does and parses it back with Prometheus'
// text parser.
func gather(t testing.TB, reg *prometheus.Registry) string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	if _, err := p.TextToMetricFamilies(strings.NewReader(b.String())); err != nil {
		t.Fatalf("does not parse: %v\n%s", err, b.String())
	}
	return b.String()
}

// memberlist's metrics come out in Prometheus' names and base units.
func TestGossipSink(t *testing.T) {
	sink := metrics.NewGossipSink()
	reg := prometheus.NewRegistry()
	reg.MustRegister(sink)
	sink.IncrCounterWithLabels([]string{"memberlist", "msg", "alive"}, 1, nil)
	sink.IncrCounterWithLabels([]string{"memberlist", "msg", "alive"}, 1, nil)
	sink.IncrCounterWithLabels([]string{"memberlist", "udp", "sent"}, 120, nil)
	sink.SetGaugeWithLabels([]string{"memberlist", "node", "instances"}, 3, []gometrics.Label{{Name: "node_state", Value: "alive"}})
	sink.SetGaugeWithLabels([]string{"memberlist", "health", "score"}, 2, nil)
	sink.SetGaugeWithLabels([]string{"memberlist", "health", "score"}, 0, nil)
	sink.AddSampleWithLabels([]string{"memberlist", "probeNode"}, 250, nil)
	sink.AddSampleWithLabels([]string{"memberlist", "probeNode"}, 750, nil)
	out := gather(t, reg)
	for _, want := range []string{
		"muster_memberlist_msg_alive_total 2\n",
		"muster_memberlist_udp_sent_bytes_total 120\n",
		`muster_memberlist_node_instances{node_state="alive"} 3` + "\n",
		"muster_memberlist_health_score 0\n",
		"muster_memberlist_probe_node_seconds_sum 1\n",
		"muster_memberlist_probe_node_seconds_count 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// memberlist's size.local is no size (it reads a push-pull message's header
// as a length): it is left out, and size.remote, a true size, kept.
func TestGossipSinkLeavesOutUntrueSeries(t *testing.T) {
	tests := []struct {
		name   string
		emit   func(*metrics.GossipSink)
		series string
		kept   bool
	}{
		{"size.local", func(s *metrics.GossipSink) {
			s.SetGaugeWithLabels([]string{"memberlist", "size", "local"}, 2.2e9, nil)
		}, "muster_memberlist_size_local", false},
		{"size.remote", func(s *metrics.GossipSink) {
			s.AddSampleWithLabels([]string{"memberlist", "size", "remote"}, 900, nil)
		}, "muster_memberlist_size_remote_bytes_sum 900\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := metrics.NewGossipSink()
			reg := prometheus.NewRegistry()
			reg.MustRegister(sink)
			tt.emit(sink)
			if out := gather(t, reg); strings.Contains(out, tt.series) != tt.kept {
				t.Errorf("%q kept: %v, want %v; scrape:\n%s", tt.series, !tt.kept, tt.kept, out)
			}
		})
	}
}

// Whatever key and labels memberlist emits, the scrape still parses.
func FuzzGossipSink(f *testing.F) {
	f.Add("memberlist.probeNode", "node_state", "alive", float32(3))
	f.Add("memberlist.udp.sent", "", "", float32(-1))
	f.Add("a-b.9c.é", "x y", "\n\"", float32(1e30))
	f.Fuzz(func(t *testing.T, key, label, value string, v float32) {
		sink := metrics.NewGossipSink()
		reg := prometheus.NewRegistry()
		reg.MustRegister(sink)
		parts := strings.Split(key, ".")
		var labels []gometrics.Label
		if label != "" {
			labels = []gometrics.Label{{Name: label, Value: value}}
		}
		sink.IncrCounterWithLabels(parts, v, labels)
		sink.SetGaugeWithLabels(append(parts, "g"), v, labels)
		sink.AddSampleWithLabels(append(parts, "s"), v, labels)
		gather(t, reg)
	})
}
