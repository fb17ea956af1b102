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
