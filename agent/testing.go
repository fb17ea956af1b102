package agent

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/rendezvous"
)

// TestCluster is a store and n agents in one process, each agent a "node"
// on its own loopback address (127.0.0.2, 127.0.0.3, ...).
type TestCluster struct {
	Store  *rendezvous.Server
	Agents []*Agent
	Client *rendezvous.Client
}

// NewTestCluster starts a store and n agents for a test; edit may change
// each agent's configuration (i is its index). Everything stops when the
// test ends.
func NewTestCluster(t testing.TB, n int, edit func(i int, cfg *Config)) *TestCluster {
	t.Helper()
	store := rendezvous.NewTestStore(t, nil)
	tc := &TestCluster{Store: store, Client: rendezvous.NewTestClient(t, store, rendezvous.TestSecurity(store))}
	for i := 0; i < n; i++ {
		tc.AddAgent(t, func(cfg *Config) {
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
func (tc *TestCluster) AddAgent(t testing.TB, edit func(cfg *Config)) *Agent {
	t.Helper()
	i := len(tc.Agents)
	cfg := Config{
		Logger:    zaptest.NewLogger(t).Named(fmt.Sprintf("node-%d", i)),
		StoreAddr: tc.Store.Addr(),
		Security:  rendezvous.TestSecurity(tc.Store),
		Name:      fmt.Sprintf("node-%d", i),
		Addr:      fmt.Sprintf("127.0.0.%d", i+2),
		Rank:      -1,
		Environ:   []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		TempDir:   t.TempDir(),
	}
	if edit != nil {
		edit(&cfg)
	}
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(0) })
	<-a.ReadyNotify()
	tc.Agents = append(tc.Agents, a)
	return a
}
