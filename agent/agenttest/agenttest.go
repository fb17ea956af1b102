// Package agenttest starts a store and agents in one process for tests.
package agenttest

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

// Cluster is a store and n agents in one process, each agent a "node" on
// its own loopback address (127.0.0.2, 127.0.0.3, ...).
type Cluster struct {
	Store  *storeserver.Server
	Agents []*agent.Agent
	Client *storeclient.Client
}

// NewCluster starts a store and n agents for a test; edit may change each
// agent's configuration (i is its index). Everything stops when the test
// ends.
func NewCluster(t testing.TB, n int, edit func(i int, cfg *agent.Config)) *Cluster {
	t.Helper()
	store := rendezvoustest.NewStore(t, nil)
	tc := &Cluster{Store: store, Client: rendezvoustest.NewClient(t, store, rendezvoustest.Security(store))}
	for i := 0; i < n; i++ {
		tc.AddAgent(t, func(cfg *agent.Config) {
			if edit != nil {
				edit(i, cfg)
			}
		})
	}
	return tc
}

// AddAgent starts one more agent, the cluster's next "node" (node-N on
// 127.0.0.N+2), as a node that joins later; edit may change its
// configuration.
func (tc *Cluster) AddAgent(t testing.TB, edit func(cfg *agent.Config)) *agent.Agent {
	t.Helper()
	i := len(tc.Agents)
	cfg := agent.Config{
		Logger:    zaptest.NewLogger(t).Named(fmt.Sprintf("node-%d", i)),
		StoreAddr: tc.Store.Addr(),
		Security:  rendezvoustest.Security(tc.Store),
		Name:      fmt.Sprintf("node-%d", i),
		Addr:      fmt.Sprintf("127.0.0.%d", i+2),
		Rank:      -1,
		Environ:   []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		TempDir:   t.TempDir(),
	}
	if edit != nil {
		edit(&cfg)
	}
	a, err := agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(0) })
	tc.Agents = append(tc.Agents, a)
	return a
}
