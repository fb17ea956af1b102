package metrics

import "github.com/prometheus/client_golang/prometheus"

// AgentStats is what an agent holds now, read at each scrape.
type AgentStats struct {
	// Jobs is how many jobs run on this node.
	Jobs int
	// TCPStores is how many PyTorch TCPStores this node serves, and
	// TCPStoreConns and TCPStoreKeys their connections and keys together.
	TCPStores, TCPStoreConns, TCPStoreKeys int
}

type agentCollector struct {
	stats                         func() AgentStats
	ready                         func() error
	jobs, stores, conns, keys, ok *prometheus.Desc
}

// NewAgentCollector is a collector of what stats returns at each scrape,
// and of whether ready says the node is ready (see Server's /readyz).
func NewAgentCollector(stats func() AgentStats, ready func() error) prometheus.Collector {
	return &agentCollector{
		stats:  stats,
		ready:  ready,
		jobs:   prometheus.NewDesc(Namespace+"_agent_jobs", "Jobs running on this node.", nil, nil),
		stores: prometheus.NewDesc(Namespace+"_tcpstore_servers", "PyTorch TCPStores this node serves (one per job whose node rank 0 it is).", nil, nil),
		conns:  prometheus.NewDesc(Namespace+"_tcpstore_connections", "Open connections to this node's TCPStores.", nil, nil),
		keys:   prometheus.NewDesc(Namespace+"_tcpstore_keys", "Keys this node's TCPStores hold.", nil, nil),
		ok:     prometheus.NewDesc(Namespace+"_agent_ready", "1 when /readyz answers 200: registered with a store, gossip joined, GPUs seen.", nil, nil),
	}
}

func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.stores
	ch <- c.conns
	ch <- c.keys
	ch <- c.ok
}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(st.Jobs))
	ch <- prometheus.MustNewConstMetric(c.stores, prometheus.GaugeValue, float64(st.TCPStores))
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(st.TCPStoreConns))
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.TCPStoreKeys))
	ready := 0.0
	if c.ready() == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(c.ok, prometheus.GaugeValue, ready)
}
