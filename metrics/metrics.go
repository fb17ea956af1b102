// Package metrics is an agent's Prometheus metrics and its probes: a
// registry per process (no global one), the store's counters and
// histograms (a rendezvous.Recorder), collectors that read the store's and
// the agent's state at scrape time, memberlist's own metrics, and the HTTP
// server of /metrics, /healthz and /readyz.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every muster metric.
const Namespace = "muster"

// NewRegistry is a process's registry: muster_build_info{version,commit},
// and the Go runtime's and the process's standard metrics.
func NewRegistry(version, commit string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help:        "The build running: its version and commit; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit}})
	info.Set(1)
	reg.MustRegister(info, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
