package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// --output-ranks prints only the ranks it names; --log-dir still gets all
// of them. 64 workers, as a node of 8 GPUs × 8 would run.
func TestOutputRanks(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	r := runLauncher(t, "run", "--embedded", "--nproc", "64", "--output-ranks", "0,5-7,63", "--log-dir", logs, "--",
		"sh", "-c", `echo "line 1 of $RANK"; echo "line 2 of $RANK"`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	sort.Strings(got)
	var want []string
	for _, rank := range []string{"0", "5", "6", "7", "63"} {
		want = append(want, "["+rank+"] line 1 of "+rank, "["+rank+"] line 2 of "+rank)
	}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stdout:\n%s\nwant the lines of ranks 0, 5-7 and 63:\n%s", r.stdout, strings.Join(want, "\n"))
	}
	files, _ := filepath.Glob(filepath.Join(logs, "*", "rank-*[0-9].log")) // stdout; stderr is rank-N.err.log
	if len(files) != 64 {
		t.Fatalf("%d log files, want 64", len(files))
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err != nil || strings.Count(string(b), "\n") != 2 {
			t.Fatalf("%s: %q %v", f, b, err)
		}
	}
}

func TestTimestampOutput(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--embedded", "--nproc", "2", "--timestamp-output", "--", "sh", "-c", `echo a; echo b >&2`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[[01]\] [ab]$`)
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout+r.stderr, "\n"), "\n") {
		if !line.MatchString(l) {
			t.Fatalf("line %q has no timestamp before its tag:\nstdout %q\nstderr %q", l, r.stdout, r.stderr)
		}
	}
	if strings.Count(r.stdout, "\n") != 2 || strings.Count(r.stderr, "\n") != 2 {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}
