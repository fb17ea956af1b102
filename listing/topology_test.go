package listing

import (
	"bytes"
	"strings"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func testTopology() *musterv1.NodeTopology {
	return &musterv1.NodeTopology{AllowedCpus: "0-223", ThreadsPerCore: 2,
		Gpus: []*musterv1.TopologyGPU{
			{Index: 0, Vendor: "nvidia", PciAddr: "0000:1b:00.0", PciPath: "0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:1b:00.0",
				PciSwitch: "0000:16:00.0", NumaNode: 0, LocalCpus: "0-55,112-167", NearestNic: "mlx5_0", NearestBy: "switch"},
			{Index: 1, Vendor: "nvidia", PciAddr: "0000:00:05.0", PciPath: "0000:00:05.0", NumaNode: -1, LocalCpus: "0-63"},
		},
		Nics:      []*musterv1.TopologyNIC{{Name: "mlx5_0", Kind: "rdma", PciAddr: "0000:1a:00.0", PciSwitch: "0000:16:00.0"}},
		NumaNodes: []*musterv1.NUMANode{{Id: 0, Cpus: "0-55,112-167", Distances: []int32{10, 21}}},
		Notes:     []string{"a note"}}
}

func TestNodesTopology(t *testing.T) {
	nodes := []*musterv1.NodeStatus{
		{Node: &musterv1.Node{Name: "a", Addr: "10.0.0.1", Topology: testTopology()}},
		{Node: &musterv1.Node{Name: "b", Addr: "10.0.0.2"}},
	}
	for _, f := range []Format{JSON, YAML} {
		var b bytes.Buffer
		if err := WriteNodes(&b, f, Nodes(nodes)); err != nil {
			t.Fatal(err)
		}
		items := decode(t, f, b.Bytes())["items"].([]any)
		topo := items[0].(map[string]any)["topology"].(map[string]any)
		gpu := topo["gpus"].([]any)[0].(map[string]any)
		for k, want := range map[string]string{"pciAddr": "0000:1b:00.0", "pciSwitch": "0000:16:00.0", "numaNode": "0",
			"localCpus": "0-55,112-167", "nearestNic": "mlx5_0", "nearestBy": "switch"} {
			if got := fmtAny(gpu[k]); got != want {
				t.Errorf("%s: GPU 0's %s = %s, want %s", f, k, got, want)
			}
		}
		if fmtAny(topo["allowedCpus"]) != "0-223" || fmtAny(topo["numaNodes"].([]any)[0].(map[string]any)["distances"]) != "[10 21]" {
			t.Errorf("%s: topology %v", f, topo)
		}
		if items[1].(map[string]any)["topology"] != nil {
			t.Errorf("%s: b's topology %v, want null", f, items[1])
		}
	}
}

func TestDoctorTopologyText(t *testing.T) {
	d := NewDoctor()
	d.Topology = TopologyOf(testTopology())
	var b bytes.Buffer
	WriteDoctor(&b, Table, d)
	for _, want := range []string{
		"topology (from sysfs):\n",
		"  allowed CPUs: 0-223 (2 threads per core)\n",
		"  NUMA node 0: CPUs 0-55,112-167, distances 10 21\n",
		"  GPU 0 (nvidia) 0000:1b:00.0: NUMA node 0, switch 0000:16:00.0, nearest NIC mlx5_0 (same PCI switch)\n",
		"  GPU 1 (nvidia) 0000:00:05.0: NUMA node none, switch none, nearest NIC none (none shares its switch or NUMA node)\n",
		"  NIC mlx5_0 (rdma) 0000:1a:00.0: NUMA node 0, switch 0000:16:00.0\n",
		"  - a note\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("doctor lacks %q:\n%s", want, b.String())
		}
	}
}
