package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gpuLine and nicLine say in one line what the tests check of a device.
func gpuLine(g GPU) string {
	return fmt.Sprintf("%s %d %s numa=%d switch=%s nic=%s/%s cpus=%s", g.Vendor, g.Index, g.PCIAddr, g.NUMANode, g.Switch, g.NearestNIC, g.NearestBy, g.LocalCPUs)
}

func nicLine(n NIC) string {
	return fmt.Sprintf("%s %s %s numa=%d switch=%s", n.Name, n.Kind, n.PCIAddr, n.NUMANode, n.Switch)
}

func TestRead(t *testing.T) {
	tests := []struct {
		name     string
		root     string
		gpus     []string
		nics     []string
		numa     []string // id cpus distances
		allowed  string
		threads  int
		cores    int
		wantNote string // a substring of one note; "" for no notes at all
	}{
		{
			name: "dgx h100",
			root: dgxH100(t, "0-223", "/", "0-223"),
			gpus: []string{
				"nvidia 0 0000:1b:00.0 numa=0 switch=0000:16:00.0 nic=mlx5_0/switch cpus=" + dgxNode0,
				"nvidia 1 0000:43:00.0 numa=0 switch=0000:3e:00.0 nic=mlx5_1/switch cpus=" + dgxNode0,
				"nvidia 2 0000:52:00.0 numa=0 switch=0000:4d:00.0 nic=mlx5_2/switch cpus=" + dgxNode0,
				"nvidia 3 0000:61:00.0 numa=0 switch=0000:5c:00.0 nic=mlx5_3/switch cpus=" + dgxNode0,
				"nvidia 4 0000:9d:00.0 numa=1 switch=0000:98:00.0 nic=mlx5_4/switch cpus=" + dgxNode1,
				"nvidia 5 0000:c3:00.0 numa=1 switch=0000:be:00.0 nic=mlx5_5/switch cpus=" + dgxNode1,
				"nvidia 6 0000:d1:00.0 numa=1 switch=0000:cc:00.0 nic=mlx5_6/switch cpus=" + dgxNode1,
				"nvidia 7 0000:df:00.0 numa=1 switch=0000:da:00.0 nic=mlx5_7/switch cpus=" + dgxNode1,
			},
			nics: []string{
				"mlx5_0 rdma 0000:1a:00.0 numa=0 switch=0000:16:00.0",
				"mlx5_1 rdma 0000:42:00.0 numa=0 switch=0000:3e:00.0",
				"mlx5_2 rdma 0000:51:00.0 numa=0 switch=0000:4d:00.0",
				"mlx5_3 rdma 0000:60:00.0 numa=0 switch=0000:5c:00.0",
				"mlx5_4 rdma 0000:9c:00.0 numa=1 switch=0000:98:00.0",
				"mlx5_5 rdma 0000:c2:00.0 numa=1 switch=0000:be:00.0",
				"mlx5_6 rdma 0000:d0:00.0 numa=1 switch=0000:cc:00.0",
				"mlx5_7 rdma 0000:de:00.0 numa=1 switch=0000:da:00.0",
				"eno1 ethernet 0000:03:00.0 numa=0 switch=",
			},
			numa:    []string{"0 " + dgxNode0 + " [10 21]", "1 " + dgxNode1 + " [21 10]"},
			allowed: "0-223", threads: 2, cores: 112,
		},
		{
			name: "one socket, four gpus, no numa node",
			root: oneSocket4GPU(t),
			gpus: []string{
				"nvidia 0 0000:00:05.0 numa=-1 switch= nic=/ cpus=0-63",
				"nvidia 1 0000:00:06.0 numa=-1 switch= nic=/ cpus=0-63",
				"nvidia 2 0000:00:07.0 numa=-1 switch= nic=/ cpus=0-63",
				"nvidia 3 0000:00:08.0 numa=-1 switch= nic=/ cpus=0-63",
			},
			nics:    []string{"ens3 ethernet 0000:00:03.0 numa=-1 switch="},
			numa:    []string{"0 0-63 [10]"},
			allowed: "0-63", threads: 1, cores: 64,
		},
		{
			name: "amd gpus",
			root: amdNode(t),
			gpus: []string{
				"amd 0 0000:0c:00.0 numa=0 switch=0000:09:00.0 nic=bnxt_re0/switch cpus=0-7",
				"amd 1 0000:22:00.0 numa=0 switch=0000:1f:00.0 nic=bnxt_re1/switch cpus=0-7",
				"amd 2 0000:8c:00.0 numa=1 switch=0000:89:00.0 nic=bnxt_re2/switch cpus=8-15",
				"amd 3 0000:a2:00.0 numa=1 switch=0000:9f:00.0 nic=bnxt_re3/switch cpus=8-15",
			},
			nics: []string{
				"bnxt_re0 rdma 0000:0d:00.0 numa=0 switch=0000:09:00.0",
				"bnxt_re1 rdma 0000:23:00.0 numa=0 switch=0000:1f:00.0",
				"bnxt_re2 rdma 0000:8d:00.0 numa=1 switch=0000:89:00.0",
				"bnxt_re3 rdma 0000:a3:00.0 numa=1 switch=0000:9f:00.0",
				"ens0np0 ethernet 0000:0d:00.0 numa=0 switch=0000:09:00.0",
				"ens1np0 ethernet 0000:23:00.0 numa=0 switch=0000:1f:00.0",
				"ens2np0 ethernet 0000:8d:00.0 numa=1 switch=0000:89:00.0",
				"ens3np0 ethernet 0000:a3:00.0 numa=1 switch=0000:9f:00.0",
			},
			numa:    []string{"0 0-7 [10 32]", "1 8-15 [32 10]"},
			allowed: "0-15", threads: 1, cores: 16,
		},
		{
			name:    "container without /sys/bus/pci",
			root:    container(t),
			numa:    []string{"0 0-7 [10]"},
			allowed: "0-3", threads: 1, cores: 8,
			wantNote: "GPUs' PCI topology unknown",
		},
		{
			name:    "smt",
			root:    smtNode(t),
			gpus:    []string{"nvidia 0 0000:01:00.0 numa=0 switch= nic=/ cpus=0-7"},
			numa:    []string{"0 0-7 [10]"},
			allowed: "0-7", threads: 2, cores: 4,
		},
		{
			name:    "cgroup cpuset narrower than the affinity",
			root:    dgxH100(t, "0-223", "/kubepods/pod1/c1", "56-111"),
			allowed: "56-111", threads: 2, cores: 112,
		},
		{
			name:    "affinity narrower than the cpuset",
			root:    dgxH100(t, "0-7", "/kubepods/pod1/c1", dgxNode0),
			allowed: "0-7", threads: 2, cores: 112,
		},
		{
			name:     "nothing at all",
			root:     t.TempDir(),
			allowed:  "",
			wantNote: "online CPUs unknown",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topo := Read(tt.root)
			if tt.gpus != nil || len(topo.GPUs) == 0 {
				var got []string
				for _, g := range topo.GPUs {
					got = append(got, gpuLine(g))
				}
				if !slices.Equal(got, tt.gpus) {
					t.Errorf("GPUs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.gpus, "\n"))
				}
			}
			if tt.nics != nil {
				var got []string
				for _, n := range topo.NICs {
					got = append(got, nicLine(n))
				}
				if !slices.Equal(got, tt.nics) {
					t.Errorf("NICs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.nics, "\n"))
				}
			}
			if tt.numa != nil {
				var got []string
				for _, n := range topo.NUMANodes {
					got = append(got, fmt.Sprintf("%d %s %v", n.ID, n.CPUs, n.Distances))
				}
				if !slices.Equal(got, tt.numa) {
					t.Errorf("NUMA nodes %q, want %q", got, tt.numa)
				}
			}
			if got := topo.Allowed.String(); got != tt.allowed {
				t.Errorf("allowed CPUs %q, want %q", got, tt.allowed)
			}
			if topo.ThreadsPerCore != tt.threads || len(topo.Cores) != tt.cores {
				t.Errorf("%d threads per core, %d cores; want %d, %d", topo.ThreadsPerCore, len(topo.Cores), tt.threads, tt.cores)
			}
			if tt.wantNote == "" && len(topo.Notes) > 0 {
				t.Errorf("notes: %q", topo.Notes)
			}
			if tt.wantNote != "" && !slices.ContainsFunc(topo.Notes, func(s string) bool { return strings.Contains(s, tt.wantNote) }) {
				t.Errorf("no note says %q: %q", tt.wantNote, topo.Notes)
			}
		})
	}
}

func TestReadSMTSiblings(t *testing.T) {
	topo := Read(smtNode(t))
	var got []string
	for _, c := range topo.Cores {
		got = append(got, c.String())
	}
	if want := []string{"0,4", "1,5", "2,6", "3,7"}; !slices.Equal(got, want) {
		t.Errorf("cores %q, want %q", got, want)
	}
}

// A link that leads outside the root, and odd attribute values, are
// skipped or taken as unknown; they never end the reading.
func TestReadOddFiles(t *testing.T) {
	f := newFixture(t)
	f.cpus("0-3", noSMT, []string{"0-3"}, []string{"10 x"}, "0-3", "", "")
	dir := f.pci("pci0000:00/0000:00:01.0", "0x030200", "0x10de", 0, "0-3")
	f.file(dir+"/numa_node", "banana")
	f.file(dir+"/local_cpulist", "3-1")
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(f.root, "sys/class/infiniband/mlx5_0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.root, "sys/class/infiniband/mlx5_0/device")); err != nil {
		t.Fatal(err)
	}
	topo := Read(f.root)
	if len(topo.GPUs) != 1 || topo.GPUs[0].NUMANode != -1 || len(topo.GPUs[0].LocalCPUs) != 0 {
		t.Errorf("GPUs %+v", topo.GPUs)
	}
	if len(topo.NICs) != 0 {
		t.Errorf("NICs %+v", topo.NICs)
	}
	for _, want := range []string{"NIC mlx5_0", "NUMA node 0: distances"} {
		if !slices.ContainsFunc(topo.Notes, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no note says %q: %q", want, topo.Notes)
		}
	}
}

func TestPCIAddr(t *testing.T) {
	for s, want := range map[string]bool{
		"0000:1b:00.0": true, "10000:00:01.7": true, "0000:1B:00.0": false, "0000:1b:20.0": false,
		"0000:1b:00.8": false, "pci0000:00": false, "000:1b:00.0": false, "0000:1b:00": false, "virtio0": false,
	} {
		if _, ok := parsePCIAddr(s); ok != want {
			t.Errorf("parsePCIAddr(%q) = %v, want %v", s, ok, want)
		}
	}
	if comparePCI("0000:9d:00.0", "0000:1b:00.0") <= 0 || comparePCI("0001:00:00.0", "0000:ff:00.0") <= 0 {
		t.Error("PCI addresses out of order")
	}
}
