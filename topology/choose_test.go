package topology

import (
	"slices"
	"strings"
	"testing"
)

// The bindings a reader chooses by hand from each fixture's layout.
func TestNUMABinding(t *testing.T) {
	dgx := Read(dgxH100(t, "0-223", "/", "0-223"))
	secondSocket := Read(dgxH100(t, "0-223", "/kubepods/pod1/c1", "56-111"))
	taskset := Read(dgxH100(t, "0-7,60-63", "/", "0-223"))
	vm := Read(oneSocket4GPU(t))
	amd := Read(amdNode(t))
	bare := Read(container(t))
	tests := []struct {
		name     string
		topo     *Topology
		vendor   string
		gpus     []int
		cpus     string
		nodes    []int
		wantNote string
	}{
		{"dgx gpu 0", dgx, VendorNVIDIA, []int{0}, dgxNode0, []int{0}, ""},
		{"dgx gpu 7", dgx, VendorNVIDIA, []int{7}, dgxNode1, []int{1}, ""},
		{"dgx gpus 0-3", dgx, VendorNVIDIA, []int{0, 1, 2, 3}, dgxNode0, []int{0}, ""},
		{"dgx gpus across sockets", dgx, VendorNVIDIA, []int{3, 4}, "0-223", []int{0, 1}, ""},
		{"cpuset on the other socket", secondSocket, VendorNVIDIA, []int{0}, "56-111", []int{0}, "hold none of NUMA node 0"},
		{"cpuset on the gpu's socket", secondSocket, VendorNVIDIA, []int{5}, "56-111", []int{1}, ""},
		{"affinity set by the user", taskset, VendorNVIDIA, []int{6}, "60-63", []int{1}, ""},
		{"no numa node", vm, VendorNVIDIA, []int{2}, "0-63", []int{}, "no NUMA node"},
		{"amd gpu 2", amd, VendorAMD, []int{2}, "8-15", []int{1}, ""},
		{"amd index is not an nvidia one", amd, VendorNVIDIA, []int{2}, "0-15", []int{}, "not in the topology"},
		{"no gpus", dgx, VendorNVIDIA, nil, "0-223", []int{}, "no GPUs"},
		{"container", bare, VendorNVIDIA, []int{0}, "0-3", []int{}, "not in the topology"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NUMABinding(tt.topo, tt.vendor, tt.gpus)
			if b.CPUs.String() != tt.cpus || !slices.Equal(b.NUMANodes, tt.nodes) {
				t.Errorf("CPUs %s, NUMA nodes %v; want %s, %v", b.CPUs, b.NUMANodes, tt.cpus, tt.nodes)
			}
			if (tt.wantNote == "") != (b.Note == "") || !strings.Contains(b.Note, tt.wantNote) {
				t.Errorf("note %q, want one saying %q", b.Note, tt.wantNote)
			}
		})
	}
}

func TestNearestNIC(t *testing.T) {
	nics := []NIC{
		{Name: "mlx5_0", Kind: NICRDMA, PCI: PCI{Switch: "0000:16:00.0", NUMANode: 0}},
		{Name: "mlx5_1", Kind: NICRDMA, PCI: PCI{Switch: "0000:3e:00.0", NUMANode: 0}},
		{Name: "mlx5_4", Kind: NICRDMA, PCI: PCI{Switch: "0000:98:00.0", NUMANode: 1}},
		{Name: "eno1", Kind: NICEthernet, PCI: PCI{NUMANode: 1}},
		{Name: "ens3", Kind: NICEthernet, PCI: PCI{NUMANode: -1}},
	}
	tests := []struct {
		name string
		dev  PCI
		nic  string
		by   string
	}{
		{"same switch", PCI{Switch: "0000:3e:00.0", NUMANode: 0}, "mlx5_1", "switch"},
		{"no switch: first on its numa node, rdma first", PCI{NUMANode: 1}, "mlx5_4", "numa"},
		{"a switch of its own", PCI{Switch: "0000:c0:00.0", NUMANode: 0}, "mlx5_0", "numa"},
		{"no numa node never matches -1", PCI{NUMANode: -1}, "", ""},
		{"another numa node", PCI{NUMANode: 2}, "", ""},
	}
	for _, tt := range tests {
		i, by := NearestNIC(nics, tt.dev)
		name := ""
		if i >= 0 {
			name = nics[i].Name
		}
		if name != tt.nic || by != tt.by {
			t.Errorf("%s: %q by %q, want %q by %q", tt.name, name, by, tt.nic, tt.by)
		}
	}
}

func TestProto(t *testing.T) {
	p := Read(dgxH100(t, "0-223", "/", "0-223")).Proto()
	if len(p.GetGpus()) != 8 || len(p.GetNics()) != 9 || len(p.GetNumaNodes()) != 2 || p.GetAllowedCpus() != "0-223" || p.GetThreadsPerCore() != 2 {
		t.Fatalf("proto %v", p)
	}
	g := p.GetGpus()[5]
	if g.GetPciAddr() != "0000:c3:00.0" || g.GetNumaNode() != 1 || g.GetNearestNic() != "mlx5_5" || g.GetLocalCpus() != dgxNode1 ||
		g.GetPciPath() != "0000:bd:01.0/0000:be:00.0/0000:bf:00.0/0000:c3:00.0" {
		t.Errorf("GPU 5: %v", g)
	}
}
