package listing

import (
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestBindingLine(t *testing.T) {
	started := func(b *musterv1.WorkerBinding) *musterv1.WorkerStarted {
		return &musterv1.WorkerStarted{Rank: 2, LocalRank: 2, Node: "a", Pid: 7, Binding: b}
	}
	tests := []struct {
		name    string
		b       *musterv1.WorkerBinding
		line    string
		unknown string
	}{
		{"a gpu under a nic's switch", &musterv1.WorkerBinding{Gpus: []int32{2}, NumaNodes: []int32{0}, Cpus: "0-55,112-167", Nic: "mlx5_2", NicBy: "switch"},
			"rank 2 (node a, local rank 2): GPUs 2, NUMA node 0, CPUs 0-55,112-167 (not bound: --cpu-bind none), NIC mlx5_2 (same PCI switch)", ""},
		{"a nic on the numa node", &musterv1.WorkerBinding{Gpus: []int32{4, 5}, NumaNodes: []int32{1}, Cpus: "56-111", Nic: "eno1", NicBy: "numa"},
			"rank 2 (node a, local rank 2): GPUs 4,5, NUMA node 1, CPUs 56-111 (not bound: --cpu-bind none), NIC eno1 (same NUMA node)", ""},
		{"gpus on two numa nodes", &musterv1.WorkerBinding{Gpus: []int32{3, 4}, NumaNodes: []int32{0, 1}, Cpus: "0-223", Nic: "mlx5_3", NicBy: "switch"},
			"rank 2 (node a, local rank 2): GPUs 3,4, NUMA nodes 0,1, CPUs 0-223 (not bound: --cpu-bind none), NIC mlx5_3 (same PCI switch)", ""},
		{"no numa node, no nic", &musterv1.WorkerBinding{Gpus: []int32{2}, Cpus: "0-63", CpusNote: "GPU 2 has no NUMA node: all allowed CPUs"},
			"rank 2 (node a, local rank 2): GPUs 2, no NUMA node, CPUs 0-63 (GPU 2 has no NUMA node: all allowed CPUs; not bound: --cpu-bind none), no NIC near", ""},
		{"bound to cores", &musterv1.WorkerBinding{Gpus: []int32{2}, NumaNodes: []int32{0}, Cpus: "28-41,140-153", Applied: true, Mode: "cores", Threads: 14,
			MemoryNodes: []int32{0}, Nic: "mlx5_2", NicBy: "switch"},
			"rank 2 (node a, local rank 2): GPUs 2, NUMA node 0, CPUs 28-41,140-153 (bound: cores, 14 core(s)), memory on NUMA node 0, NIC mlx5_2 (same PCI switch)", ""},
		{"bound without numa nodes", &musterv1.WorkerBinding{Gpus: []int32{1}, Cpus: "16-31", CpusNote: "GPU 1 has no NUMA node: a share of the allowed CPUs", Applied: true, Mode: "cores", Threads: 16},
			"rank 2 (node a, local rank 2): GPUs 1, no NUMA node, CPUs 16-31 (bound: cores, 16 core(s); GPU 1 has no NUMA node: a share of the allowed CPUs), no NIC near", ""},
		{"cpu worker bound", &musterv1.WorkerBinding{Cpus: "2-3", CpusNote: "no GPUs: a share of the allowed CPUs", Applied: true, Mode: "cores", Threads: 2},
			"rank 2 (node a, local rank 2): no GPUs, CPUs 2-3 (bound: cores, 2 core(s); no GPUs: a share of the allowed CPUs)", ""},
		{"binding failed", &musterv1.WorkerBinding{Gpus: []int32{0}, NumaNodes: []int32{0}, Cpus: "0-55", CpusNote: "could not bind: invalid argument", Mode: "numa", Nic: "mlx5_0", NicBy: "switch"},
			"rank 2 (node a, local rank 2): GPUs 0, NUMA node 0, CPUs 0-55 (could not bind: invalid argument; not bound: --cpu-bind numa), NIC mlx5_0 (same PCI switch)", ""},
		{"no gpus", &musterv1.WorkerBinding{Cpus: "0-1", CpusNote: "no GPUs: all allowed CPUs"},
			"rank 2 (node a, local rank 2): no GPUs, CPUs 0-1 (all allowed; not bound: --cpu-bind none)", ""},
		{"cpus too many to send", &musterv1.WorkerBinding{CpusNote: "a list of 4096 CPUs, too long to send"},
			"rank 2 (node a, local rank 2): no GPUs, CPUs not sent (a list of 4096 CPUs, too long to send; not bound: --cpu-bind none)", ""},
		{"sysfs hidden", &musterv1.WorkerBinding{Gpus: []int32{2}, Unknown: "GPU 2 is not in its sysfs topology"},
			"rank 2 (node a, local rank 2): GPUs 2, binding unknown", "binding unknown on node a: GPU 2 is not in its sysfs topology"},
		{"an agent that sends none", nil,
			"rank 2 (node a, local rank 2): no GPUs, binding unknown", "binding unknown on node a: its agent computes none (an older version)"},
	}
	for _, tt := range tests {
		s := started(tt.b)
		if got := BindingLine(s); got != tt.line {
			t.Errorf("%s:\n got  %q\n want %q", tt.name, got, tt.line)
		}
		if got := BindingUnknown(s); got != tt.unknown {
			t.Errorf("%s: unknown %q, want %q", tt.name, got, tt.unknown)
		}
	}
}
