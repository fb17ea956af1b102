package entrypoint

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/node"
)

// In agent run the store lives in the rendezvous host's process, and the
// job cannot go on without it. A connection to it that closed, while gossip
// does not say the host left, is that process's death: the other nodes stop
// at once rather than wait seconds for gossip to declare the host dead.

// connectionClosed says whether err is the store's connection closing or
// refused, rather than a call the store answered.
func connectionClosed(err error) bool { return err != nil && status.Code(err) == codes.Unavailable }

// signal sends on c without waiting.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// storeHost is the name of the member that hosts the store, as gossip
// knows it, and whether it left gracefully.
func storeHost(n *node.Node) (name string, left bool) {
	for _, m := range n.Gossip().Members() {
		if m.Meta.Store {
			return m.Name, m.State == cluster.Left
		}
	}
	return "unknown", false
}
