package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/musterhq/muster/testfixture"
)

// listedJob is what the tests read of a job in `launcher jobs -o json`.
type listedJob struct {
	ID      string
	Command []string
}

// docExamples is every command line in a docs page's sh blocks, without
// its comment.
func docExamples(t *testing.T, page string) []string {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		for _, l := range strings.Split(block[1], "\n") {
			if l, _, _ = strings.Cut(l, " #"); strings.TrimSpace(l) != "" {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
	}
	return lines
}

// Every example of docs/flags.md runs as written, against a cluster of
// one agent, and flags after a command's arguments are taken as kubectl's
// and docker's users type them.
func TestFlagsDocExamples(t *testing.T) {
	t.Parallel()
	ap := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), nil)
	if r := runLauncher(t, "run", "--cluster", ap.addr, "--nproc", "2", "--", "sh", "-c", "echo rank $RANK"); r.code != 0 {
		t.Fatalf("job: exit %d: %s", r.code, r.stderr)
	}
	var jobs struct{ Items []listedJob }
	r := runLauncher(t, "jobs", "--cluster", ap.addr, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &jobs); r.code != 0 || err != nil {
		t.Fatalf("jobs -o json: exit %d (%v): %s%s", r.code, err, r.stdout, r.stderr)
	}
	// Not the jobs that found the agent ready.
	i := slices.IndexFunc(jobs.Items, func(j listedJob) bool { return slices.Contains(j.Command, "echo rank $RANK") })
	if i < 0 {
		t.Fatalf("the job is not listed: %s", r.stdout)
	}
	job := jobs.Items[i].ID
	var nodes struct{ Items []struct{ Name string } }
	r = runLauncher(t, "nodes", "--cluster", ap.addr, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &nodes); r.code != 0 || err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes -o json: exit %d (%v): %s%s", r.code, err, r.stdout, r.stderr)
	}
	node := nodes.Items[0].Name
	hosts := filepath.Join(t.TempDir(), "hosts.txt")
	if err := os.WriteFile(hosts, []byte("node01 slots=4\nnode02 slots=4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gpus, _ := filepath.Glob("/dev/nvidia[0-9]*")

	examples := docExamples(t, "../docs/flags.md")
	if len(examples) < 10 {
		t.Fatalf("only %d examples in docs/flags.md", len(examples))
	}
	for _, line := range examples {
		words := shellWords(line)
		if words[0] != "launcher" {
			t.Errorf("docs/flags.md: %q is not a launcher command", line)
			continue
		}
		if slices.Contains(words, "--gpus") && len(gpus) == 0 {
			t.Logf("%s: skipped: this machine has no GPU", line)
			continue
		}
		args := []string{}
		for _, w := range words[1:] {
			switch w {
			case "HOST:PORT":
				w = ap.addr
			case "JOB", "JOB...":
				w = job
			case "NODE", "NODE...":
				w = node
			case "hosts.txt":
				w = hosts
			case "python", "./cpu_job":
				w = "true"
			}
			args = append(args, w)
		}
		if r := runLauncher(t, args...); r.code != 0 {
			t.Errorf("%s: exit %d\n%s%s", line, r.code, r.stdout, r.stderr)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", job, "-f", "--cluster", ap.addr}, "[1] rank 1\n"},
		{[]string{"logs", job, "--rank", "1", "--cluster", ap.addr}, "rank 1\n"},
		{[]string{"jobs", job, "-o", "json", "--cluster", ap.addr}, `"id": "` + job + `"`},
		{[]string{"hostlist", "expand", "node[01-16]", "-o", "json"}, `"name": "node16"`},
	} {
		if r := runLauncher(t, tc.args...); r.code != 0 || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("launcher %s: exit %d, want %q in its output\n%s%s", strings.Join(tc.args, " "), r.code, tc.want, r.stdout, r.stderr)
		}
	}
}
