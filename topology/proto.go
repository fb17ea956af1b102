package topology

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Bounds on what an agent publishes: the store keeps a node's metadata in
// memory and shows it to every `launcher nodes`, so it stays small.
const (
	maxPublishedNUMANodes = 64
	maxPublishedNotes     = 8
)

// Proto is the topology as the agent publishes it with its node.
func (t *Topology) Proto() *musterv1.NodeTopology {
	p := &musterv1.NodeTopology{AllowedCpus: t.Allowed.String(), ThreadsPerCore: int32(t.ThreadsPerCore)}
	for _, g := range t.GPUs {
		p.Gpus = append(p.Gpus, &musterv1.TopologyGPU{Index: int32(g.Index), Vendor: g.Vendor, PciAddr: g.PCIAddr,
			PciPath: g.Path, PciSwitch: g.Switch, NumaNode: int32(g.NUMANode), LocalCpus: g.LocalCPUs.String(),
			NearestNic: g.NearestNIC, NearestBy: g.NearestBy})
	}
	for _, n := range t.NICs {
		p.Nics = append(p.Nics, &musterv1.TopologyNIC{Name: n.Name, Kind: n.Kind, PciAddr: n.PCIAddr,
			PciPath: n.Path, PciSwitch: n.Switch, NumaNode: int32(n.NUMANode)})
	}
	for i, n := range t.NUMANodes {
		if i == maxPublishedNUMANodes {
			p.Notes = append(p.Notes, "more NUMA nodes than published")
			break
		}
		m := &musterv1.NUMANode{Id: int32(n.ID), Cpus: n.CPUs.String()}
		for j, d := range n.Distances {
			if j == maxPublishedNUMANodes {
				break
			}
			m.Distances = append(m.Distances, int32(d))
		}
		p.NumaNodes = append(p.NumaNodes, m)
	}
	for i, n := range t.Notes {
		if i == maxPublishedNotes {
			break
		}
		p.Notes = append(p.Notes, n)
	}
	if size := proto.Size(p); size > jobspec.MaxTopologyBytes {
		return &musterv1.NodeTopology{AllowedCpus: p.AllowedCpus, ThreadsPerCore: p.ThreadsPerCore,
			Notes: []string{fmt.Sprintf("topology of %d bytes not published, more than %d", size, jobspec.MaxTopologyBytes)}}
	}
	return p
}
