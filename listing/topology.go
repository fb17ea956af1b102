package listing

import (
	"fmt"
	"io"
	"strings"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Topology is a node's hardware topology as its agent read it from sysfs:
// in `launcher nodes -o json|yaml` and `launcher doctor -o json|yaml`. CPU
// sets are in the kernel's list format ("0-55,112-167").
type Topology struct {
	GPUs      []TopologyGPU  `json:"gpus" yaml:"gpus"`
	NICs      []TopologyNIC  `json:"nics" yaml:"nics"`
	NUMANodes []TopologyNUMA `json:"numaNodes" yaml:"numaNodes"`
	// AllowedCPUs are the CPUs the agent may run workers on.
	AllowedCPUs string `json:"allowedCpus" yaml:"allowedCpus"`
	// ThreadsPerCore is 1 without SMT, 0 when unknown.
	ThreadsPerCore int32 `json:"threadsPerCore" yaml:"threadsPerCore"`
	// Notes say what could not be read.
	Notes []string `json:"notes" yaml:"notes"`
}

// TopologyGPU is one GPU: its vendor's index (PCI bus order, NVML's), where
// it sits, and the NIC nearest it ("switch": under the same PCI switch,
// "numa": on the same NUMA node).
type TopologyGPU struct {
	Index      int32  `json:"index" yaml:"index"`
	Vendor     string `json:"vendor" yaml:"vendor"`
	PCIAddr    string `json:"pciAddr" yaml:"pciAddr"`
	PCIPath    string `json:"pciPath" yaml:"pciPath"`
	PCISwitch  string `json:"pciSwitch" yaml:"pciSwitch"`
	NUMANode   int32  `json:"numaNode" yaml:"numaNode"`
	LocalCPUs  string `json:"localCpus" yaml:"localCpus"`
	NearestNIC string `json:"nearestNic" yaml:"nearestNic"`
	NearestBy  string `json:"nearestBy" yaml:"nearestBy"`
}

// TopologyNIC is one NIC with a PCI function: kind rdma or ethernet.
type TopologyNIC struct {
	Name      string `json:"name" yaml:"name"`
	Kind      string `json:"kind" yaml:"kind"`
	PCIAddr   string `json:"pciAddr" yaml:"pciAddr"`
	PCIPath   string `json:"pciPath" yaml:"pciPath"`
	PCISwitch string `json:"pciSwitch" yaml:"pciSwitch"`
	NUMANode  int32  `json:"numaNode" yaml:"numaNode"`
}

// TopologyNUMA is one NUMA node: its CPUs and distances to each node.
type TopologyNUMA struct {
	ID        int32   `json:"id" yaml:"id"`
	CPUs      string  `json:"cpus" yaml:"cpus"`
	Distances []int32 `json:"distances" yaml:"distances"`
}

// TopologyOf turns what an agent published into the schema; nil (an agent
// that publishes none) stays nil.
func TopologyOf(p *musterv1.NodeTopology) *Topology {
	if p == nil {
		return nil
	}
	t := &Topology{GPUs: []TopologyGPU{}, NICs: []TopologyNIC{}, NUMANodes: []TopologyNUMA{},
		AllowedCPUs: p.GetAllowedCpus(), ThreadsPerCore: p.GetThreadsPerCore(), Notes: append([]string{}, p.GetNotes()...)}
	for _, g := range p.GetGpus() {
		t.GPUs = append(t.GPUs, TopologyGPU{Index: g.GetIndex(), Vendor: g.GetVendor(), PCIAddr: g.GetPciAddr(),
			PCIPath: g.GetPciPath(), PCISwitch: g.GetPciSwitch(), NUMANode: g.GetNumaNode(), LocalCPUs: g.GetLocalCpus(),
			NearestNIC: g.GetNearestNic(), NearestBy: g.GetNearestBy()})
	}
	for _, n := range p.GetNics() {
		t.NICs = append(t.NICs, TopologyNIC{Name: n.GetName(), Kind: n.GetKind(), PCIAddr: n.GetPciAddr(),
			PCIPath: n.GetPciPath(), PCISwitch: n.GetPciSwitch(), NUMANode: n.GetNumaNode()})
	}
	for _, n := range p.GetNumaNodes() {
		t.NUMANodes = append(t.NUMANodes, TopologyNUMA{ID: n.GetId(), CPUs: n.GetCpus(), Distances: append([]int32{}, n.GetDistances()...)})
	}
	return t
}

// writeTopology writes the topology as text, for `launcher doctor`.
func writeTopology(w io.Writer, t *Topology) {
	fmt.Fprintf(w, "  allowed CPUs: %s", cmpOr(t.AllowedCPUs, "unknown"))
	if t.ThreadsPerCore > 0 {
		fmt.Fprintf(w, " (%d threads per core)", t.ThreadsPerCore)
	}
	fmt.Fprintln(w)
	for _, n := range t.NUMANodes {
		d := make([]string, len(n.Distances))
		for i, v := range n.Distances {
			d[i] = fmt.Sprint(v)
		}
		fmt.Fprintf(w, "  NUMA node %d: CPUs %s, distances %s\n", n.ID, cmpOr(n.CPUs, "none"), cmpOr(strings.Join(d, " "), "unknown"))
	}
	if len(t.GPUs) == 0 {
		fmt.Fprintln(w, "  GPUs: none found in sysfs")
	}
	for _, g := range t.GPUs {
		nic := "none (none shares its switch or NUMA node)"
		if g.NearestNIC != "" {
			nic = fmt.Sprintf("%s (same %s)", g.NearestNIC, map[string]string{"switch": "PCI switch", "numa": "NUMA node"}[g.NearestBy])
		}
		fmt.Fprintf(w, "  GPU %d (%s) %s: NUMA node %s, switch %s, nearest NIC %s\n", g.Index, g.Vendor, g.PCIAddr,
			numaName(g.NUMANode), cmpOr(g.PCISwitch, "none"), nic)
	}
	for _, n := range t.NICs {
		fmt.Fprintf(w, "  NIC %s (%s) %s: NUMA node %s, switch %s\n", n.Name, n.Kind, n.PCIAddr, numaName(n.NUMANode), cmpOr(n.PCISwitch, "none"))
	}
	for _, note := range t.Notes {
		fmt.Fprintf(w, "  - %s\n", note)
	}
}

func numaName(n int32) string {
	if n < 0 {
		return "none"
	}
	return fmt.Sprint(n)
}
