package node

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/version"
)

// nodeMetrics is the node's registry and the server of its metrics and
// probes, when Config.MetricsAddr asks for them.
type nodeMetrics struct {
	reg    *prometheus.Registry
	gossip *metrics.GossipSink
	store  *metrics.StoreRecorder
	srv    *metrics.Server
	// started is set once Start returned: the node's parts are in place.
	started atomic.Bool
}

// startMetrics serves the node's metrics and probes from the start, so that
// /healthz answers while the node joins; /readyz says why it is not ready.
func (n *Node) startMetrics(cfg Config) error {
	if cfg.MetricsAddr == "" {
		return nil
	}
	m := &nodeMetrics{reg: metrics.NewRegistry(version.Parts())}
	m.gossip = metrics.NewGossipSink()
	m.reg.MustRegister(m.gossip)
	srv, err := metrics.Start(metrics.ServerConfig{Logger: n.log, Addr: cfg.MetricsAddr, Gatherer: m.reg, Ready: n.Ready})
	if err != nil {
		return err
	}
	m.srv = srv
	n.metrics = m
	go func() {
		// The node goes on without its metrics: its jobs matter more.
		for err := range srv.Err() {
			n.log.Error("the metrics server stopped", zap.Error(err))
		}
	}()
	return nil
}

// metricsStarted registers the collectors of the parts Start made, the
// store's when the node hosts it, and marks the node started.
func (n *Node) metricsStarted() {
	m := n.metrics
	if m == nil {
		return
	}
	if n.store != nil {
		m.reg.MustRegister(metrics.NewStoreCollector(n.store.Store().Stats))
	}
	m.reg.MustRegister(metrics.NewAgentCollector(func() metrics.AgentStats {
		st := n.agent.Stats()
		return metrics.AgentStats{Jobs: st.Jobs, TCPStores: st.TCPStores, TCPStoreConns: st.TCPStoreConns, TCPStoreKeys: st.TCPStoreKeys}
	}, n.Ready))
	m.started.Store(true)
}

// MetricsAddr is where the node serves its metrics and probes, or "".
func (n *Node) MetricsAddr() string {
	if n.metrics == nil {
		return ""
	}
	return n.metrics.srv.Addr()
}

// Ready says why the node cannot take jobs, or nil when it can: its agent
// is registered with a store, its gossip member (if any) has joined
// another, and its GPUs were seen (found through NVML or declared) when it
// expected any: a CPU node without NVIDIA's library is ready.
func (n *Node) Ready() error {
	if n.metrics != nil && !n.metrics.started.Load() {
		return errors.New("starting: the node has yet to join the cluster and register with its store")
	}
	if !n.agent.Connected() {
		return errors.New("not registered with the store: the agent is registering again")
	}
	if n.gossip != nil && n.gossipPeers > 0 && n.gossip.NumAlive() < 2 {
		return errors.New("gossip: no other member of the cluster is alive")
	}
	if n.gpus == 0 && n.gpusWhy != "" {
		why := n.agent.GPUError()
		if why == "" {
			why = "none found"
		}
		return fmt.Errorf("no GPUs seen, though %s: %s", n.gpusWhy, why)
	}
	return nil
}

// closeMetrics stops the metrics server, if any, within its bound.
func (n *Node) closeMetrics() {
	if n.metrics != nil {
		if err := n.metrics.srv.Close(); err != nil {
			n.log.Debug("metrics server close", zap.Error(err))
		}
	}
}
