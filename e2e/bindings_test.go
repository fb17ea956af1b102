package e2e

import (
	"bufio"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// --report-bindings on the embedded default: a line per rank as it starts,
// saying its binding (no GPUs here) or, once for the node, why there is
// none; the job runs as without it, and --events carries each binding.
func TestReportBindings(t *testing.T) {
	t.Parallel()
	events := filepath.Join(t.TempDir(), "events")
	r := runLauncher(t, "run", "--nproc", "3", "--report-bindings", "--events", events, "sh", "-c", `echo "rank $RANK"`)
	if r.code != 0 || strings.Count(r.stdout, "rank ") != 3 {
		t.Fatalf("exit %d, want 0 and three ranks' output; stdout %q, stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	line := regexp.MustCompile(`^muster: rank (\d) \(node \S+, local rank (\d)\): no GPUs, (CPUs \S+ \(all allowed; not bound: --cpu-bind none\)|binding unknown)$`)
	ranks, unknown := map[string]int{}, 0
	for l := range strings.SplitSeq(strings.TrimSpace(r.stderr), "\n") {
		switch m := line.FindStringSubmatch(l); {
		case m != nil && m[1] == m[2]:
			ranks[m[1]]++
		case strings.HasPrefix(l, "muster: binding unknown on node "):
			unknown++
		default:
			t.Errorf("line %q: not a binding", l)
		}
	}
	if len(ranks) != 3 || ranks["0"] != 1 || ranks["1"] != 1 || ranks["2"] != 1 || unknown > 1 {
		t.Errorf("rank lines %v, %d unknown; want one for each of ranks 0-2, the node's binding unknown at most once; stderr:\n%s", ranks, unknown, r.stderr)
	}

	started := 0
	sc := bufio.NewScanner(strings.NewReader(readFile(t, events)))
	for sc.Scan() {
		var ev struct {
			Type    string
			Binding *struct {
				GPUs    []int32 `json:"gpus"`
				CPUs    string  `json:"cpus"`
				Unknown string  `json:"unknown"`
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("events line %q: %v", sc.Text(), err)
		}
		if ev.Type != "worker_started" {
			continue
		}
		started++
		if b := ev.Binding; b == nil || len(b.GPUs) != 0 || (b.CPUs == "") == (b.Unknown == "") {
			t.Errorf("worker_started %s: want a binding with no GPUs and its CPUs or why unknown", sc.Text())
		}
	}
	if started != 3 {
		t.Errorf("%d worker_started lines, want 3", started)
	}
}
