package rendezvous

import (
	"fmt"
	"net/netip"
	"regexp"

	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/fabric"
	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// maxOutputBytes bounds one output event an agent publishes.
const maxOutputBytes = 1 << 20

// nodeChars is a node name's alphabet. Its length is checked apart: a
// counted repetition such as {0,252} compiles to a program that long, which
// every process importing this package built at start-up.
var nodeChars = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// isNodeName says whether s is a host name: letters, digits, '.', '_', '-', at most 253.
func isNodeName(s string) bool { return len(s) <= 253 && nodeChars.MatchString(s) }

// validateSpec checks a spec that came over the network and fills in its
// defaults.
func validateSpec(spec *musterv1.JobSpec) error {
	if err := jobspec.Validate(spec); err != nil {
		return err
	}
	jobspec.Defaults(spec)
	return nil
}

func validateNode(n *musterv1.Node) error {
	if n == nil {
		return fmt.Errorf("register: no node")
	}
	if !isNodeName(n.GetName()) {
		return fmt.Errorf("register: node name %q is not a host name (letters, digits, '.', '_', '-', at most 253)", n.GetName())
	}
	if _, err := netip.ParseAddr(n.GetAddr()); err != nil {
		return fmt.Errorf("register: node %s: address %q is not an IP address", n.GetName(), n.GetAddr())
	}
	if len(n.GetGpus()) > jobspec.MaxGPUs {
		return fmt.Errorf("register: node %s offers %d GPUs, more than %d", n.GetName(), len(n.GetGpus()), jobspec.MaxGPUs)
	}
	if t := n.GetTopology(); t != nil && proto.Size(t) > jobspec.MaxTopologyBytes {
		return fmt.Errorf("register: node %s: topology of %d bytes, more than %d", n.GetName(), proto.Size(t), jobspec.MaxTopologyBytes)
	}
	if err := fabric.FromProto(n.GetFabric()).Check(); err != nil {
		return fmt.Errorf("register: node %s: fabric path: %w", n.GetName(), err)
	}
	if n.GetCpus() < 0 {
		return fmt.Errorf("register: node %s reports %d CPUs", n.GetName(), n.GetCpus())
	}
	seen := map[int32]bool{}
	for _, g := range n.GetGpus() {
		if g.GetIndex() < 0 || seen[g.GetIndex()] {
			return fmt.Errorf("register: node %s: GPU index %d is negative or repeated", n.GetName(), g.GetIndex())
		}
		seen[g.GetIndex()] = true
	}
	if n.GetRank() < -1 || n.GetRank() >= jobspec.MaxNodes {
		return fmt.Errorf("register: node %s: node rank %d is outside -1..%d", n.GetName(), n.GetRank(), jobspec.MaxNodes-1)
	}
	return nil
}

func totalLen[T ~string | ~[]byte](ss []T) int {
	n := 0
	for _, s := range ss {
		n += len(s)
	}
	return n
}
