package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/cluster"
)

// One store per gossip cluster, or one store's replicas (--store-peers):
// replicas of the store pass one another over here. Agents find their store through gossip;
// with two, each agent registers with whichever it found first, and a job
// waits for nodes that are registered with the other. A node that would
// host a second store is refused at start. Of two stores started at once,
// each joining the other, the node whose name sorts first keeps its store
// and the other is refused: one is left, not none. A node that sees
// another store appear later (a partition healed, a node that joins both)
// says so loudly, as does the other.

// otherStores are the alive members, other than this node, that host a
// store, as gossip knows them.
func (n *Node) otherStores(replicas []string) []cluster.Member {
	var out []cluster.Member
	for _, m := range n.gossip.Members() {
		if m.Name != n.gossip.Name() && m.State == cluster.Alive && m.Meta.Store && !slices.Contains(replicas, m.Meta.GRPCAddr) {
			out = append(out, m)
		}
	}
	return out
}

// claimWait bounds how long a starting store waits for another one, started
// at the same time, to yield: it leaves at once when it sees this one, and
// one that died instead is dead to gossip within the node timeout.
func (n *Node) claimWait() time.Duration { return 2 * n.nodeTimeout }

// claimStore decides whether this node, which hosts a store and has joined
// its peers while gossiping that its store is starting, keeps it. It
// refuses when another node's store runs, or starts too on a node whose
// name sorts first. One starting on a node whose name sorts after this
// one's yields once it sees this one: claimStore waits for it to go, or to
// run (it never saw this one: then this one yields).
func (n *Node) claimStore(ctx context.Context, replicas []string) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(n.claimWait())
	for {
		var waitFor string
		for _, m := range n.otherStores(replicas) {
			if !m.Meta.StoreStarting || m.Name < n.gossip.Name() {
				return storeRefused(m)
			}
			waitFor = m.Name
		}
		if waitFor == "" {
			return nil
		}
		if time.Now().After(deadline) {
			n.log.Warn("a store started at the same time on another node has not yielded to this one; going on",
				zap.String("node", waitFor), zap.Duration("waited", n.claimWait()))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// storeRefused is why a node may not host a store: m hosts one.
func storeRefused(m cluster.Member) error {
	why := ""
	if m.Meta.StoreStarting {
		why = " (started at the same time as this one: the node whose name sorts first keeps its store)"
	}
	return fmt.Errorf("this gossip cluster has a store already, hosted by node %s at %s%s: one store per cluster "+
		"(join it: drop --listen; or host a cluster of its own with another cluster token)", m.Name, m.Meta.GRPCAddr, why)
}

// warnOtherStore says loudly, once per member, that another node of this
// gossip cluster hosts a store too. A store still starting is passed over:
// it yields, or says it runs, which warns then.
func (n *Node) warnOtherStore(ev cluster.Event) {
	m := ev.Member
	if n.store == nil || m.Name == n.gossip.Name() || !m.Meta.Store || m.Meta.StoreStarting || slices.Contains(n.replicas, m.Meta.GRPCAddr) ||
		(ev.Type != cluster.EventJoin && ev.Type != cluster.EventUpdate) {
		return
	}
	if n.warnedStores == nil {
		n.warnedStores = map[string]bool{}
	}
	if n.warnedStores[m.Name] {
		return
	}
	n.warnedStores[m.Name] = true
	n.log.Error("ANOTHER STORE IN THIS GOSSIP CLUSTER: agents register with either, and jobs wait for nodes registered "+
		"with the other; stop one of them, or give its cluster another token",
		zap.String("node", m.Name), zap.String("store", m.Meta.GRPCAddr), zap.String("this-store", n.store.AdvertiseAddr()))
}
