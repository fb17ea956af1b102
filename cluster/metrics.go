package cluster

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
)

// memberLabel is the label memberlist puts on every metric of a member
// (memberlist.Config.MetricLabels): the router below delivers the metric to
// that member's sink and drops the label.
const memberLabel = "muster_member"

// memberlist reports its metrics through go-metrics' process-wide instance,
// whatever the member: the router is installed there once, and hands each
// metric to the sink of the member that emitted it, so that two members of
// one process (a test's cluster) never mix their metrics.
var (
	routerOnce sync.Once
	router     = &metricRouter{sinks: map[string]gometrics.MetricSink{}}
	memberIDs  atomic.Uint64
)

// routeMetrics gives sink the metrics of the member labelled id, until the
// returned function is called.
func routeMetrics(id string, sink gometrics.MetricSink) (remove func()) {
	routerOnce.Do(func() {
		conf := gometrics.DefaultConfig("")
		// No host name in the keys, no runtime sampler: memberlist's own
		// metrics only.
		conf.EnableHostname, conf.EnableRuntimeMetrics = false, false
		conf.TimerGranularity = time.Millisecond
		gometrics.NewGlobal(conf, router)
	})
	router.mu.Lock()
	router.sinks[id] = sink
	router.mu.Unlock()
	return func() {
		router.mu.Lock()
		delete(router.sinks, id)
		router.mu.Unlock()
	}
}

// newMemberID is a label value unique in the process.
func newMemberID() string { return strconv.FormatUint(memberIDs.Add(1), 10) }

type metricRouter struct {
	mu    sync.RWMutex
	sinks map[string]gometrics.MetricSink
}

// route finds the sink of the member in labels and the labels left.
func (r *metricRouter) route(labels []gometrics.Label) (gometrics.MetricSink, []gometrics.Label) {
	for i, l := range labels {
		if l.Name != memberLabel {
			continue
		}
		r.mu.RLock()
		sink := r.sinks[l.Value]
		r.mu.RUnlock()
		rest := make([]gometrics.Label, 0, len(labels)-1)
		rest = append(append(rest, labels[:i]...), labels[i+1:]...)
		return sink, rest
	}
	return nil, nil
}

func (r *metricRouter) SetGauge([]string, float32)    {}
func (r *metricRouter) EmitKey([]string, float32)     {}
func (r *metricRouter) IncrCounter([]string, float32) {}
func (r *metricRouter) AddSample([]string, float32)   {}

func (r *metricRouter) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	if s, rest := r.route(labels); s != nil {
		s.SetGaugeWithLabels(key, val, rest)
	}
}

func (r *metricRouter) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	if s, rest := r.route(labels); s != nil {
		s.IncrCounterWithLabels(key, val, rest)
	}
}

func (r *metricRouter) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	if s, rest := r.route(labels); s != nil {
		s.AddSampleWithLabels(key, val, rest)
	}
}
