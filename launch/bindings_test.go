package launch

import (
	"maps"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/testfixture"
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
			"rank 2 (node a, local rank 2): GPUs 2, NUMA node 0, CPUs 0-55,112-167 (not applied: no --cpu-bind yet), NIC mlx5_2 (same PCI switch)", ""},
		{"a nic on the numa node", &musterv1.WorkerBinding{Gpus: []int32{4, 5}, NumaNodes: []int32{1}, Cpus: "56-111", Nic: "eno1", NicBy: "numa"},
			"rank 2 (node a, local rank 2): GPUs 4,5, NUMA node 1, CPUs 56-111 (not applied: no --cpu-bind yet), NIC eno1 (same NUMA node)", ""},
		{"gpus on two numa nodes", &musterv1.WorkerBinding{Gpus: []int32{3, 4}, NumaNodes: []int32{0, 1}, Cpus: "0-223", Nic: "mlx5_3", NicBy: "switch"},
			"rank 2 (node a, local rank 2): GPUs 3,4, NUMA nodes 0,1, CPUs 0-223 (not applied: no --cpu-bind yet), NIC mlx5_3 (same PCI switch)", ""},
		{"no numa node, no nic", &musterv1.WorkerBinding{Gpus: []int32{2}, Cpus: "0-63", CpusNote: "GPU 2 has no NUMA node: all allowed CPUs"},
			"rank 2 (node a, local rank 2): GPUs 2, no NUMA node, CPUs 0-63 (GPU 2 has no NUMA node: all allowed CPUs; not applied: no --cpu-bind yet), no NIC near", ""},
		{"applied", &musterv1.WorkerBinding{Gpus: []int32{2}, NumaNodes: []int32{0}, Cpus: "0-55", Applied: true, Nic: "mlx5_2", NicBy: "switch"},
			"rank 2 (node a, local rank 2): GPUs 2, NUMA node 0, CPUs 0-55, NIC mlx5_2 (same PCI switch)", ""},
		{"no gpus", &musterv1.WorkerBinding{Cpus: "0-1", CpusNote: "no GPUs: all allowed CPUs"},
			"rank 2 (node a, local rank 2): no GPUs, CPUs 0-1 (all allowed; not applied: no --cpu-bind yet)", ""},
		{"cpus too many to send", &musterv1.WorkerBinding{CpusNote: "a list of 4096 CPUs, too long to send"},
			"rank 2 (node a, local rank 2): no GPUs, CPUs not sent (a list of 4096 CPUs, too long to send; not applied: no --cpu-bind yet)", ""},
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

// --report-bindings prints one line per rank as it starts, and nothing
// without it; a node whose sysfs gives no binding says so at most once.
func TestReportBindings(t *testing.T) {
	tc := agenttest.NewCluster(t, 2, nil)
	for _, report := range []bool{false, true} {
		var stdout, stderr testfixture.Buffer
		code, err := Run(t.Context(), zaptest.NewLogger(t), tc.Client, Options{
			Spec:   &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 2, Nproc: 2, KillTimeoutMs: 1000},
			Stdout: &stdout, Stderr: &stderr, ReportBindings: report,
		})
		if err != nil || code != 0 {
			t.Fatalf("exit %d, %v; stderr %q", code, err, stderr.String())
		}
		ranks, unknown := map[string]int{}, 0
		for line := range strings.SplitSeq(stderr.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "muster: rank "); ok && strings.Contains(rest, ": no GPUs, ") {
				ranks[rest[:strings.IndexByte(rest, ' ')]]++
			}
			if strings.HasPrefix(line, "muster: binding unknown on node ") {
				unknown++
			}
		}
		want := map[string]int{"0": 1, "1": 1, "2": 1, "3": 1}
		if !report {
			want = map[string]int{}
		}
		if !maps.Equal(ranks, want) || unknown > 2 || (!report && unknown > 0) {
			t.Errorf("--report-bindings %v: rank lines %v, %d unknown; want %v; stderr:\n%s", report, ranks, unknown, want, stderr.String())
		}
	}
}
