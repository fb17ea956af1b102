package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// NearestNIC picks the NIC nearest a device at dev: one under the same PCI
// switch, else one on the same NUMA node; among equals an RDMA device first,
// then by name (nics as Read orders them). It returns the NIC's index in
// nics and "switch" or "numa", or -1 and "" when none is near.
func NearestNIC(nics []NIC, dev PCI) (int, string) {
	if dev.Switch != "" {
		for i, n := range nics {
			if n.Switch == dev.Switch {
				return i, "switch"
			}
		}
	}
	if dev.NUMANode >= 0 {
		for i, n := range nics {
			if n.NUMANode == dev.NUMANode {
				return i, "numa"
			}
		}
	}
	return -1, ""
}

// Binding is the CPUs a worker would be bound to, and why.
type Binding struct {
	// CPUs it would run on; NUMANodes its GPUs' NUMA nodes, empty when
	// they have none.
	CPUs      CPUSet
	NUMANodes []int
	// Note says why the binding is wider than the GPUs' NUMA nodes, when
	// it is, or why workers share cores; "" otherwise.
	Note string
	// Threads is how many cores the worker has to itself (see Bind).
	Threads int
}

// NUMABinding is the "numa" binding of a worker that uses the given GPUs
// (indices among the vendor's GPUs): the CPUs of its GPUs' NUMA nodes
// within the allowed CPUs. When a GPU has no NUMA node (-1), or the allowed
// CPUs hold none of the nodes' CPUs, it is all allowed CPUs, with a note.
func NUMABinding(t *Topology, vendor string, gpus []int) Binding {
	all := Binding{CPUs: t.Allowed, NUMANodes: []int{}}
	if len(gpus) == 0 {
		all.Note = "no GPUs: all allowed CPUs"
		return all
	}
	var nodes []int
	for _, idx := range gpus {
		i := slices.IndexFunc(t.GPUs, func(g GPU) bool { return g.Vendor == vendor && g.Index == idx })
		if i < 0 {
			all.Note = fmt.Sprintf("GPU %d not in the topology: all allowed CPUs", idx)
			return all
		}
		if n := t.GPUs[i].NUMANode; n < 0 {
			all.Note = fmt.Sprintf("GPU %d has no NUMA node: all allowed CPUs", idx)
			return all
		} else if !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	var cpus CPUSet
	for _, n := range nodes {
		i := slices.IndexFunc(t.NUMANodes, func(m NUMANode) bool { return m.ID == n })
		if i < 0 {
			all.Note = fmt.Sprintf("NUMA node %d's CPUs unknown: all allowed CPUs", n)
			return all
		}
		cpus = cpus.Union(t.NUMANodes[i].CPUs)
	}
	b := Binding{CPUs: cpus.Intersect(t.Allowed), NUMANodes: nodes}
	if len(b.CPUs) == 0 {
		all.NUMANodes = nodes
		all.Note = fmt.Sprintf("the allowed CPUs %s hold none of NUMA node %s's: all allowed CPUs", t.Allowed, joinInts(nodes))
		return all
	}
	return b
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
