package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/topology"
)

func cpuSet(t *testing.T, list string) topology.CPUSet {
	t.Helper()
	s, err := topology.ParseCPUList(list)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// twoSockets is a node of two NUMA nodes with SMT, GPUs 0-1 on the first
// and 2-3 on the second; GPUs 0-2 share a PCI switch with a NIC, GPU 3
// only a NUMA node.
func twoSockets(t *testing.T) *topology.Topology {
	gpu := func(i, numa int, nic, by string) topology.GPU {
		return topology.GPU{Index: i, Vendor: topology.VendorNVIDIA, PCI: topology.PCI{NUMANode: numa}, NearestNIC: nic, NearestBy: by}
	}
	return &topology.Topology{
		GPUs: []topology.GPU{gpu(0, 0, "mlx5_0", "switch"), gpu(1, 0, "mlx5_1", "switch"), gpu(2, 1, "mlx5_2", "switch"), gpu(3, 1, "mlx5_2", "numa")},
		NUMANodes: []topology.NUMANode{
			{ID: 0, CPUs: cpuSet(t, "0-3,8-11")},
			{ID: 1, CPUs: cpuSet(t, "4-7,12-15")},
		},
		Allowed: cpuSet(t, "0-15"),
	}
}

// vm is a virtual machine's node: its GPUs have no NUMA node.
func vm(t *testing.T) *topology.Topology {
	return &topology.Topology{
		GPUs:      []topology.GPU{{Index: 0, Vendor: topology.VendorNVIDIA, PCI: topology.PCI{NUMANode: -1}}},
		NUMANodes: []topology.NUMANode{{ID: 0, CPUs: cpuSet(t, "0-7")}},
		Allowed:   cpuSet(t, "0-7"),
	}
}

// amdOnly is a node whose GPUs are all AMD's: their indices are AMD's.
func amdOnly(t *testing.T) *topology.Topology {
	return &topology.Topology{
		GPUs: []topology.GPU{
			{Index: 0, Vendor: topology.VendorAMD, PCI: topology.PCI{NUMANode: 0}, NearestNIC: "bnxt_re0", NearestBy: "switch"},
			{Index: 1, Vendor: topology.VendorAMD, PCI: topology.PCI{NUMANode: 1}, NearestNIC: "bnxt_re1", NearestBy: "switch"},
		},
		NUMANodes: []topology.NUMANode{{ID: 0, CPUs: cpuSet(t, "0-7")}, {ID: 1, CPUs: cpuSet(t, "8-15")}},
		Allowed:   cpuSet(t, "0-15"),
	}
}

// containerRoot is a small sysfs tree of a container that hides
// /sys/bus/pci: CPUs and a NUMA node, no devices.
func containerRoot(t *testing.T) string {
	root := t.TempDir()
	for rel, body := range map[string]string{
		"sys/devices/system/cpu/online":          "0-3",
		"sys/devices/system/node/node0/cpulist":  "0-3",
		"sys/devices/system/node/node0/distance": "10",
		"proc/self/status":                       "Name:\tagent\nCpus_allowed_list:\t0-3",
	} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestBindingOf(t *testing.T) {
	var every2nd []string
	for c := 0; c < topology.MaxCPUs; c += 2 {
		every2nd = append(every2nd, strconv.Itoa(c))
	}
	sparse := &topology.Topology{Allowed: cpuSet(t, strings.Join(every2nd, ","))}
	tests := []struct {
		name string
		topo *topology.Topology
		gpus []int
		want *musterv1.WorkerBinding
		// unknown, when set, is what Unknown says, in part.
		unknown string
	}{
		{"gpu 0: its socket and the nic under its switch", twoSockets(t), []int{0},
			&musterv1.WorkerBinding{Gpus: []int32{0}, NumaNodes: []int32{0}, Cpus: "0-3,8-11", Nic: "mlx5_0", NicBy: "switch"}, ""},
		{"gpus 2-3: one socket, the first gpu's nic", twoSockets(t), []int{2, 3},
			&musterv1.WorkerBinding{Gpus: []int32{2, 3}, NumaNodes: []int32{1}, Cpus: "4-7,12-15", Nic: "mlx5_2", NicBy: "switch"}, ""},
		{"gpu 3: a nic on its numa node only", twoSockets(t), []int{3},
			&musterv1.WorkerBinding{Gpus: []int32{3}, NumaNodes: []int32{1}, Cpus: "4-7,12-15", Nic: "mlx5_2", NicBy: "numa"}, ""},
		{"gpus across sockets", twoSockets(t), []int{1, 2},
			&musterv1.WorkerBinding{Gpus: []int32{1, 2}, NumaNodes: []int32{0, 1}, Cpus: "0-15", Nic: "mlx5_1", NicBy: "switch"}, ""},
		{"no gpus: all allowed cpus", twoSockets(t), nil,
			&musterv1.WorkerBinding{Cpus: "0-15", CpusNote: "no GPUs: all allowed CPUs"}, ""},
		{"a gpu the topology lacks", twoSockets(t), []int{9}, nil, "GPU 9 is not in its sysfs topology"},
		{"no numa node", vm(t), []int{0},
			&musterv1.WorkerBinding{Gpus: []int32{0}, Cpus: "0-7", CpusNote: "GPU 0 has no NUMA node: all allowed CPUs"}, ""},
		{"amd gpus by amd's index", amdOnly(t), []int{1},
			&musterv1.WorkerBinding{Gpus: []int32{1}, NumaNodes: []int32{1}, Cpus: "8-15", Nic: "bnxt_re1", NicBy: "switch"}, ""},
		{"container hiding the pci bus", topology.Read(containerRoot(t)), []int{0}, nil,
			"GPU 0 is not in its sysfs topology: GPUs' PCI topology unknown"},
		{"container, no gpus", topology.Read(containerRoot(t)), nil,
			&musterv1.WorkerBinding{Cpus: "0-3", CpusNote: "no GPUs: all allowed CPUs"}, ""},
		{"no sysfs at all", topology.Read(t.TempDir()), []int{0}, nil, "its CPUs are not in sysfs: online CPUs unknown"},
		{"a cpu list too long to send", sparse, nil,
			&musterv1.WorkerBinding{CpusNote: "a list of 4096 CPUs, too long to send"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bindingsOf(tt.topo, topology.BindNone, [][]int{tt.gpus}, nil)[0].report
			if proto.Size(got) > jobspec.MaxBindingBytes {
				t.Errorf("%d bytes, more than %d", proto.Size(got), jobspec.MaxBindingBytes)
			}
			if tt.unknown != "" {
				if !strings.Contains(got.GetUnknown(), tt.unknown) || got.GetCpus() != "" || got.GetNic() != "" ||
					!slices.Equal(got.GetGpus(), toInt32s(tt.gpus)) {
					t.Errorf("got %v, want unknown saying %q", got, tt.unknown)
				}
				return
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
	if bindingsOf(nil, topology.BindNone, [][]int{{0}}, nil)[0].report != nil {
		t.Error("a binding without a topology")
	}
}

func toInt32s(ns []int) []int32 {
	var out []int32
	for _, n := range ns {
		out = append(out, int32(n))
	}
	return out
}

// With a mode, each worker gets CPUs, memory and its UCX device to bind;
// without one, nothing is bound and UCX is told nothing.
func TestBindingsOfAMode(t *testing.T) {
	topo := twoSockets(t)
	topo.Cores = nil // one CPU a core
	topo.NICs = []topology.NIC{{Name: "mlx5_0", Kind: topology.NICRDMA, Port: 1}, {Name: "mlx5_2", Kind: topology.NICRDMA, Port: 1}}
	gpus := [][]int{{0}, {1}, {2}}
	none := bindingsOf(topo, topology.BindNone, gpus, nil)
	for i, b := range none {
		if b.cpus != nil || b.memory != nil || b.ucxDevice != "" || b.report.GetThreads() != 0 || b.report.GetMode() != "" {
			t.Errorf("none, worker %d: %+v, want nothing bound", i, b)
		}
	}
	cores := bindingsOf(topo, topology.BindCores, gpus, nil)
	want := []struct {
		cpus   string
		memory []int
		ucx    string
	}{{"0-3", []int{0}, "mlx5_0:1"}, {"8-11", []int{0}, ""}, {"4-7,12-15", []int{1}, "mlx5_2:1"}}
	for i, b := range cores {
		if topology.CPUSet(b.cpus).String() != want[i].cpus || !slices.Equal(b.memory, want[i].memory) || b.ucxDevice != want[i].ucx ||
			b.report.GetMode() != "cores" || b.report.GetCpus() != want[i].cpus || b.report.GetThreads() < 1 {
			t.Errorf("cores, worker %d: cpus %v memory %v ucx %q report %v; want %s, %v, %q", i, b.cpus, b.memory, b.ucxDevice, b.report, want[i].cpus, want[i].memory, want[i].ucx)
		}
	}
}
