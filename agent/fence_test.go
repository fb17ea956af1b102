package agent_test

import (
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/storeserver"
)

// A store answered slowly is no lost store: a lease renewal answered 2.4 s
// after it was sent, longer than a renewal once waited (2 s), still renews
// the lease from the time it was sent, and the node's job runs on past the
// fence bound to its end.
func TestSlowRenewalsKeepTheLease(t *testing.T) {
	t.Parallel()
	const fence = 12 * time.Second
	store := rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.FenceAfter = fence })
	tc := &agenttest.Cluster{Store: store, Client: rendezvoustest.NewClient(t, store, rendezvoustest.Security(store))}
	slow := newProxy(t, store.Addr(), 1200*time.Millisecond)
	tc.AddAgent(t, func(cfg *agent.Config) { cfg.StoreAddr = slow.addr() })
	out, fin := follow(t, tc, &musterv1.JobSpec{
		Argv: args("sh", "-c", "sleep 12; echo done"), Nnodes: 1, Nproc: 1, KillTimeoutMs: 1000})
	if fin.GetExitCode() != 0 || len(out[0]) != 1 || out[0][0] != "done" {
		t.Fatalf("job ended with %d (%s), output %q", fin.GetExitCode(), fin.GetSummary(), out)
	}
}
