package metrics

import (
	"slices"
	"strings"
	"sync"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// GossipSink takes one memberlist member's go-metrics (cluster.Config's
// MetricSink) and serves them as muster_memberlist_* metrics: counters as
// _total, samples as summaries (count and sum), timings in seconds and
// sizes in bytes. Register it with the registry it is served from.
type GossipSink struct {
	mu     sync.Mutex
	series map[string]*gossipSeries // by name and label values
}

type gossipSeries struct {
	name, help  string
	kind        prometheus.ValueType // Counter, Gauge; Untyped for a summary
	labelNames  []string
	labelValues []string
	value       float64 // counter or gauge
	count       uint64  // summary
	sum         float64
}

// units are the memberlist keys whose values have a unit, with the factor
// that brings them to base units: go-metrics times in milliseconds.
var units = map[string]struct {
	suffix string
	scale  float64
}{
	"memberlist.udp.sent": {"bytes", 1}, "memberlist.tcp.sent": {"bytes", 1}, "memberlist.udp.received": {"bytes", 1},
	"memberlist.size.remote": {"bytes", 1}, "memberlist.probeNode": {"seconds", 1e-3},
	"memberlist.gossip": {"seconds", 1e-3}, "memberlist.pushPullNode": {"seconds", 1e-3},
}

// untrue are the memberlist keys the sink leaves out: what they report is
// not what their names say. memberlist's size.local reads the first 4 bytes
// of its push-pull header as a length, which the message does not carry: it
// is always 0x83a54e6f (2.2e9), whatever the cluster. The same state's true
// size is what its peers record as size.remote.
var untrue = map[string]bool{"memberlist.size.local": true}

// maxGossipSeries bounds what the sink keeps: memberlist emits about 20
// series; a label with many values stops being added there.
const maxGossipSeries = 256

// NewGossipSink is an empty sink.
func NewGossipSink() *GossipSink { return &GossipSink{series: map[string]*gossipSeries{}} }

// metricName is key as a Prometheus name: muster_memberlist_probe_node_seconds.
func metricName(key []string, suffix string) string {
	var b strings.Builder
	b.WriteString(Namespace)
	for _, part := range key {
		b.WriteByte('_')
		for i, r := range part {
			switch {
			case 'A' <= r && r <= 'Z':
				if i > 0 {
					b.WriteByte('_')
				}
				b.WriteRune(r + 'a' - 'A')
			case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
				b.WriteRune(r)
			default:
				b.WriteByte('_')
			}
		}
	}
	if suffix != "" {
		b.WriteString("_" + suffix)
	}
	return b.String()
}

// labelName is a go-metrics label's name as a valid Prometheus label name,
// never one of the names Prometheus keeps for itself (__*).
func labelName(name string) string {
	n := metricName([]string{name}, "")[len(Namespace)+1:]
	if n == "" || n[0] == '_' || n[0] >= '0' && n[0] <= '9' {
		n = "label_" + n
	}
	return n
}

// get finds or adds the series of key and labels, with the sink locked.
func (s *GossipSink) get(key []string, labels []gometrics.Label, kind prometheus.ValueType) (*gossipSeries, float64) {
	dotted := strings.Join(key, ".")
	if untrue[dotted] {
		return nil, 0
	}
	u, ok := units[dotted]
	if !ok {
		u.scale = 1
	}
	suffix := u.suffix
	if kind == prometheus.CounterValue {
		suffix = strings.TrimPrefix(suffix+"_total", "_")
	}
	name := metricName(key, suffix)
	id := name
	for _, l := range labels {
		id += "\xff" + l.Name + "\xff" + l.Value
	}
	if ser := s.series[id]; ser != nil {
		return ser, u.scale
	}
	if len(s.series) >= maxGossipSeries {
		return nil, 0
	}
	ser := &gossipSeries{name: name, kind: kind, help: "memberlist's " + strings.ToValidUTF8(dotted, "?") + " (go-metrics)."}
	for _, l := range labels {
		ln := labelName(l.Name)
		if slices.Contains(ser.labelNames, ln) {
			continue
		}
		ser.labelNames = append(ser.labelNames, ln)
		ser.labelValues = append(ser.labelValues, strings.ToValidUTF8(l.Value, "?"))
	}
	s.series[id] = ser
	return ser, u.scale
}

func (s *GossipSink) SetGauge(key []string, val float32) { s.SetGaugeWithLabels(key, val, nil) }
func (s *GossipSink) EmitKey(key []string, val float32)  { s.AddSample(key, val) }
func (s *GossipSink) IncrCounter(key []string, val float32) {
	s.IncrCounterWithLabels(key, val, nil)
}
func (s *GossipSink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

func (s *GossipSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ser, scale := s.get(key, labels, prometheus.GaugeValue); ser != nil {
		ser.value = float64(val) * scale
	}
}

func (s *GossipSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ser, scale := s.get(key, labels, prometheus.CounterValue); ser != nil {
		ser.value += float64(val) * scale
	}
}

func (s *GossipSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ser, scale := s.get(key, labels, prometheus.UntypedValue); ser != nil {
		ser.count++
		ser.sum += float64(val) * scale
	}
}

// Describe sends nothing: the sink's series are known only as memberlist
// emits them (an unchecked collector).
func (s *GossipSink) Describe(chan<- *prometheus.Desc) {}

func (s *GossipSink) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ser := range s.series {
		desc := prometheus.NewDesc(ser.name, ser.help, ser.labelNames, nil)
		if ser.kind == prometheus.UntypedValue {
			ch <- prometheus.MustNewConstSummary(desc, ser.count, ser.sum, nil, ser.labelValues...)
			continue
		}
		ch <- prometheus.MustNewConstMetric(desc, ser.kind, ser.value, ser.labelValues...)
	}
}
