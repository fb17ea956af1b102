package node

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/musterhq/muster/cluster"
)

// One store per gossip cluster. Agents find their store through gossip;
// with two, each agent registers with whichever it found first, and a job
// waits for nodes that are registered with the other. A node that would
// host a second store is refused at start; one that sees another store
// appear later (both started at once, or a partition healed) says so
// loudly, as does the other.

// otherStore returns an alive member, other than this node, that hosts a
// store, if gossip knows one.
func (n *Node) otherStore() (cluster.Member, bool) {
	for _, m := range n.gossip.Members() {
		if m.Name != n.gossip.Name() && m.State == cluster.Alive && m.Meta.Store {
			return m, true
		}
	}
	return cluster.Member{}, false
}

// refuseSecondStore fails a node that hosts a store in a gossip cluster
// that has one already.
func (n *Node) refuseSecondStore() error {
	m, ok := n.otherStore()
	if !ok {
		return nil
	}
	return fmt.Errorf("this gossip cluster has a store already, hosted by node %s at %s: one store per cluster "+
		"(join it: drop --listen; or host a cluster of its own with another cluster token)", m.Name, m.Meta.GRPCAddr)
}

// warnOtherStore says loudly, once per member, that another node of this
// gossip cluster hosts a store too.
func (n *Node) warnOtherStore(ev cluster.Event) {
	m := ev.Member
	if n.store == nil || m.Name == n.gossip.Name() || !m.Meta.Store ||
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
