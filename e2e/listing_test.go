package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
	"go.yaml.in/yaml/v3"
)

// eventLine is one line of a --events file, every type's fields in one.
type eventLine struct {
	Type, Time, Job                string
	Round                          int
	Nodes                          []string
	WorldSize                      int
	UniqueIDSHA256                 string `json:"uniqueIdSha256"`
	Rank                           int
	Node, DetectedBy, Cause, State string
	Reason, Summary                string
	ExitCode                       *int
	Stopped, Counted               bool
	Wanted, Ready, RestartCount    int
	ReadyNodes                     []string
}

// readEvents parses a --events file: every line a JSON object with a type,
// an RFC 3339 time and a job.
func readEvents(t *testing.T, name string) []eventLine {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []eventLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev eventLine
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("events line %q: %v", sc.Text(), err)
		}
		if _, err := time.Parse(time.RFC3339Nano, ev.Time); err != nil || ev.Type == "" || ev.Job == "" {
			t.Fatalf("events line %q: type, job or time (%v) missing", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

// countTypes counts a job's lines by type.
func countTypes(evs []eventLine, job string) map[string]int {
	n := map[string]int{}
	for _, ev := range evs {
		if ev.Job == job {
			n[ev.Type]++
		}
	}
	return n
}

func ofType(evs []eventLine, job, typ string) []eventLine {
	var out []eventLine
	for _, ev := range evs {
		if ev.Job == job && ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// jobItem is a Job of `launcher jobs -o json`.
type jobItem struct {
	Kind, ID, State                string
	ExitCode                       *int
	Nodes                          []string
	SubmitTime, StartTime, EndTime *string
}

// nodes, jobs and jobs --watch in JSON and YAML on three hosts, and
// --events of two jobs appended to one file: every count exact.
func TestNetnsListingAndEvents(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	nw.startCluster()

	r := nw.run("nodes", "-o", "json")
	var nodes struct {
		APIVersion, Kind string
		Items            []struct {
			Kind, Name, Address, Gossip string
			Registered                  bool
			Jobs                        []string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &nodes); err != nil || r.code != 0 {
		t.Fatalf("nodes -o json: exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if nodes.APIVersion != "muster/v1" || nodes.Kind != "NodeList" || len(nodes.Items) != 3 {
		t.Fatalf("nodes: %+v", nodes)
	}
	for i, n := range nodes.Items {
		if h := nw.hosts[i]; n.Kind != "Node" || n.Name != h.name || n.Address != h.ip || n.Gossip != "alive" || !n.Registered || n.Jobs == nil {
			t.Errorf("node %d: %+v, want %s at %s, alive and registered", i, n, h.name, h.ip)
		}
	}
	r = nw.run("nodes", "-o", "yaml")
	var ynodes map[string]any
	if err := yaml.Unmarshal([]byte(r.stdout), &ynodes); err != nil || ynodes["kind"] != "NodeList" || len(ynodes["items"].([]any)) != 3 {
		t.Fatalf("nodes -o yaml: %v, %v:\n%s", ynodes, err, r.stdout)
	}
	if r = nw.run("nodes", "-o", "xml"); r.code != 2 || !strings.Contains(r.stderr, `-o/--output: unknown format "xml" (want table, wide, json or yaml)`) {
		t.Fatalf("nodes -o xml: exit %d, stderr %q", r.code, r.stderr)
	}

	before := listJobs(t, nw)

	// A watch from the start: it lists the jobs there are, then each change.
	var watchOut, watchErr testfixture.Buffer
	watch := exec.Command("ip", "netns", "exec", nw.hosts[0].ns, launcherBin, "jobs", "--watch", "-o", "json",
		"--cluster", nw.store(), "--token-file", nw.token, "--tls-ca", nw.ca)
	watch.Stdout, watch.Stderr = &watchOut, &watchErr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { watch.Process.Kill(); watch.Wait() })

	events := filepath.Join(t.TempDir(), "events.jsonl")
	if r := nw.run("run", "--events", events, "-n", "3", "--nproc", "2", "--", "true"); r.code != 0 {
		t.Fatalf("first job: exit %d:\n%s", r.code, r.stderr)
	}
	if r := nw.run("run", "--events", events, "-n", "2", "--", "sh", "-c", "exit $RANK"); r.code != 1 {
		t.Fatalf("second job: exit %d:\n%s", r.code, r.stderr)
	}
	evs := readEvents(t, events)
	submitted := []string{}
	for _, ev := range evs {
		if ev.Type == "submitted" {
			submitted = append(submitted, ev.Job)
		}
	}
	if len(submitted) != 2 {
		t.Fatalf("%d submitted lines, want 2", len(submitted))
	}
	ok, failed := submitted[0], submitted[1]
	for _, tt := range []struct {
		job        string
		counts     map[string]int
		nodes      []string
		state      string
		exit, same int // exit code, and how many ranks exited with it
	}{
		{ok, map[string]int{"submitted": 1, "round_started": 1, "worker_started": 6, "worker_exited": 6, "ended": 1}, []string{"a", "b", "c"}, "succeeded", 0, 6},
		{failed, map[string]int{"submitted": 1, "round_started": 1, "worker_started": 2, "worker_exited": 2, "ended": 1}, []string{"a", "b"}, "failed", 1, 1},
	} {
		if got := countTypes(evs, tt.job); !mapsEqual(got, tt.counts) {
			t.Errorf("job %s: lines by type %v, want %v", tt.job, got, tt.counts)
		}
		round := ofType(evs, tt.job, "round_started")[0]
		if !slices.Equal(round.Nodes, tt.nodes) || round.WorldSize != tt.counts["worker_started"] || !sha256Hex.MatchString(round.UniqueIDSHA256) {
			t.Errorf("job %s: round %+v", tt.job, round)
		}
		// Rank 0 of the failing job exits with 0 or is stopped: either way
		// one line.
		same := 0
		for _, ex := range ofType(evs, tt.job, "worker_exited") {
			if ex.ExitCode != nil && *ex.ExitCode == tt.exit {
				same++
			}
		}
		end := ofType(evs, tt.job, "ended")[0]
		if same != tt.same || end.State != tt.state || end.ExitCode == nil || *end.ExitCode != tt.exit || evs[len(evs)-1].Type != "ended" {
			t.Errorf("job %s: %d ranks exited with %d, ended %+v; want %d, %s", tt.job, same, tt.exit, end, tt.same, tt.state)
		}
	}

	// The list has exactly the two jobs more, ended, with their times.
	after := listJobs(t, nw)
	if len(after) != len(before)+2 {
		t.Fatalf("%d jobs listed after two more, %d before", len(after), len(before))
	}
	for _, tt := range []struct {
		job   jobItem
		id    string
		state string
		exit  int
		nodes []string
	}{
		{after[len(after)-2], ok, "succeeded", 0, []string{"a", "b", "c"}},
		{after[len(after)-1], failed, "failed", 1, []string{"a", "b"}},
	} {
		j := tt.job
		if j.Kind != "Job" || j.ID != tt.id || j.State != tt.state || j.ExitCode == nil || *j.ExitCode != tt.exit || !slices.Equal(j.Nodes, tt.nodes) {
			t.Errorf("listed %+v, want %s %s with %d on %v", j, tt.id, tt.state, tt.exit, tt.nodes)
		}
		var times []time.Time
		for _, s := range []*string{j.SubmitTime, j.StartTime, j.EndTime} {
			if s == nil {
				t.Fatalf("job %s without a time: %+v", j.ID, j)
			}
			at, err := time.Parse(time.RFC3339, *s)
			if err != nil {
				t.Fatal(err)
			}
			times = append(times, at)
		}
		if times[1].Before(times[0]) || times[2].Before(times[1]) {
			t.Errorf("job %s: submitted %v, started %v, ended %v", j.ID, times[0], times[1], times[2])
		}
	}

	// The watch saw both jobs end, one Job a line.
	testwait.Until(t, 20*time.Second, "the watch to see the second job fail", func() bool {
		return strings.Contains(watchOut.String(), `"id":"`+failed+`","name":"","state":"failed"`)
	})
	watch.Process.Signal(syscall.SIGINT)
	if err := watch.Wait(); err != nil {
		t.Fatalf("jobs --watch after SIGINT: %v\n%s", err, watchErr.String())
	}
	last := map[string]jobItem{}
	seen := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(watchOut.String(), "\n"), "\n") {
		var j jobItem
		if err := json.Unmarshal([]byte(l), &j); err != nil || j.Kind != "Job" {
			t.Fatalf("watch line %q: %v", l, err)
		}
		last[j.ID] = j
		seen[j.ID]++
	}
	if len(last) != len(after) {
		t.Errorf("the watch named %d jobs, want %d", len(last), len(after))
	}
	for _, id := range []string{ok, failed} {
		if seen[id] < 2 || last[id].State != map[string]string{ok: "succeeded", failed: "failed"}[id] {
			t.Errorf("watch: job %s seen %d times, last %+v", id, seen[id], last[id])
		}
	}

	// A job that waits in vain for a fourth node: one waiting line with the
	// counts (progress is written when it changes), then its end.
	waiting := filepath.Join(t.TempDir(), "waiting.jsonl")
	if r := nw.run("run", "--events", waiting, "-n", "4", "--wait-timeout", "1s", "--", "true"); r.code != 1 {
		t.Fatalf("a job on 4 of 3 nodes: exit %d:\n%s", r.code, r.stderr)
	}
	evs = readEvents(t, waiting)
	job := evs[0].Job
	if got, want := countTypes(evs, job), map[string]int{"submitted": 1, "waiting": 1, "ended": 1}; !mapsEqual(got, want) {
		t.Fatalf("lines by type %v, want %v", got, want)
	}
	w := ofType(evs, job, "waiting")[0]
	if w.Wanted != 4 || w.Ready != 3 || !slices.Equal(w.ReadyNodes, []string{"a", "b", "c"}) {
		t.Errorf("waiting %+v, want 3 of 4 ready: a, b, c", w)
	}
	if end := ofType(evs, job, "ended")[0]; end.State != "failed" || *end.ExitCode != 1 || !strings.Contains(end.Summary, "waited 1s for nodes") {
		t.Errorf("ended %+v", end)
	}
}

func listJobs(t *testing.T, nw *network) []jobItem {
	t.Helper()
	r := nw.run("jobs", "-o", "json")
	var l struct {
		APIVersion, Kind string
		Items            []jobItem
	}
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || r.code != 0 || l.Kind != "JobList" || l.APIVersion != "muster/v1" {
		t.Fatalf("jobs -o json: exit %d, %v:\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	return l.Items
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A node lost while its job runs, and the restart it brings, in the
// --events stream: the loss with its cause, the restart, the second round
// on other nodes with another unique ID, each rank's start and exit.
func TestNetnsEventsNodeLostAndRestart(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	agents := nw.startCluster()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-netns-events", time.Now().UnixNano())
	events := filepath.Join(t.TempDir(), "events.jsonl")
	cmd, out, errb := nw.launcher("run", "--events", events, "-n", "2", "--nproc", "2", "--max-restarts", "1",
		"--kill-timeout", "2s", "-x", marker, "--", "sh", "-c", `[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 1000; exit 0`)
	testwait.Until(t, 20*time.Second, "4 workers", func() bool { return len(jobProcesses(t, marker)) == 4 })
	kill9(t, agents["b"])
	if r := wait(t, cmd, out, errb); r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}

	evs := readEvents(t, events)
	job := evs[0].Job
	counts := countTypes(evs, job)
	waited := counts["waiting"] // the next round may wait out b's fence
	delete(counts, "waiting")
	want := map[string]int{"submitted": 1, "round_started": 2, "worker_started": 8, "worker_exited": 6, "node_lost": 1, "restart": 1, "ended": 1}
	if !mapsEqual(counts, want) {
		t.Fatalf("lines by type %v (and %d waiting), want %v", counts, waited, want)
	}
	var order []string
	for _, ev := range evs {
		if ev.Type != "worker_started" && ev.Type != "worker_exited" && ev.Type != "waiting" {
			order = append(order, ev.Type)
		}
	}
	if want := []string{"submitted", "round_started", "node_lost", "restart", "round_started", "ended"}; !slices.Equal(order, want) {
		t.Errorf("lifecycle %v, want %v", order, want)
	}
	lost := ofType(evs, job, "node_lost")[0]
	if lost.Node != "b" || lost.DetectedBy != "agent_gone" || lost.Cause != "agent connection closed" {
		t.Errorf("node lost: %+v", lost)
	}
	re := ofType(evs, job, "restart")[0]
	if !re.Counted || re.RestartCount != 1 || re.Round != 0 || !strings.Contains(re.Reason, "node b lost") {
		t.Errorf("restart: %+v", re)
	}
	rounds := ofType(evs, job, "round_started")
	if !slices.Equal(rounds[0].Nodes, []string{"a", "b"}) || !slices.Equal(rounds[1].Nodes, []string{"a", "c"}) ||
		rounds[1].Round != 1 || rounds[1].RestartCount != 1 || rounds[0].UniqueIDSHA256 == rounds[1].UniqueIDSHA256 ||
		!sha256Hex.MatchString(rounds[1].UniqueIDSHA256) {
		t.Errorf("rounds %+v", rounds)
	}
	stopped, zero := 0, 0
	for _, ex := range ofType(evs, job, "worker_exited") {
		switch {
		case ex.Stopped && ex.Node == "a":
			stopped++ // round 0's ranks on a, stopped for the restart
		case ex.ExitCode != nil && *ex.ExitCode == 0:
			zero++
		}
	}
	end := ofType(evs, job, "ended")[0]
	if stopped != 2 || zero != 4 || end.State != "succeeded" || *end.ExitCode != 0 {
		t.Errorf("%d ranks stopped on a, %d exited with 0, ended %+v; want 2, 4, succeeded", stopped, zero, end)
	}
}

// doctor, hostfile and hostlist in JSON and YAML, from the real binary.
func TestLocalCommandsMachineReadable(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, format, out string) map[string]any {
		t.Helper()
		var v map[string]any
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(out), &v)
		} else {
			err = yaml.Unmarshal([]byte(out), &v)
		}
		if err != nil || v["apiVersion"] != "muster/v1" {
			t.Fatalf("-o %s: %v:\n%s", format, err, out)
		}
		return v
	}
	for _, format := range []string{"json", "yaml"} {
		r := runLauncher(t, "doctor", "-o", format, "--master", "127.0.0.1", "--nccl-version", "2.20.5")
		d := parse(t, format, r.stdout)
		if r.code != 0 || d["kind"] != "Doctor" || d["master"] != "127.0.0.1" || d["ncclVersion"] != "2.20.5" ||
			d["ncclVersionFrom"] != "flag" || len(d["detected"].([]any)) != 3 || len(d["reasons"].([]any)) == 0 {
			t.Errorf("doctor -o %s: exit %d, %v", format, r.code, d)
		}

		r = runLauncher(t, "hostfile", "-H", "a:2,b:4", "-o", format)
		h := parse(t, format, r.stdout)
		items, _ := h["items"].([]any)
		if r.code != 0 || h["kind"] != "HostList" || len(items) != 2 || items[1].(map[string]any)["name"] != "b" ||
			fmt.Sprint(items[1].(map[string]any)["slots"]) != "4" {
			t.Errorf("hostfile -o %s: exit %d, %v", format, r.code, h)
		}

		r = runLauncher(t, "hostlist", "expand", "-o", format, "n[01-64]")
		h = parse(t, format, r.stdout)
		items, _ = h["items"].([]any)
		if r.code != 0 || len(items) != 64 || items[63].(map[string]any)["name"] != "n64" {
			t.Errorf("hostlist expand -o %s: exit %d, %d items", format, r.code, len(items))
		}

		r = runLauncher(t, "hostlist", "compress", "-o", format, "n1", "n2,n3", "n[4-5]")
		h = parse(t, format, r.stdout)
		if r.code != 0 || h["kind"] != "Hostlist" || h["hostlist"] != "n[1-5]" || fmt.Sprint(h["count"]) != "5" {
			t.Errorf("hostlist compress -o %s: exit %d, %v", format, r.code, h)
		}
	}
	// Without -o, hostfile prints the hostfile itself; a bad -o names the flag.
	if r := runLauncher(t, "hostfile", "-H", "a:2,b:4"); r.stdout != "a slots=2\nb slots=4\n" {
		t.Errorf("hostfile: %q", r.stdout)
	}
	for _, args := range [][]string{{"doctor", "-o", "xml"}, {"hostfile", "-H", "a", "-o", "xml"}, {"hostlist", "expand", "-o", "xml", "n1"}} {
		if r := runLauncher(t, args...); r.code != 2 || !strings.Contains(r.stderr, `-o/--output: unknown format "xml" (want table, wide, json or yaml)`) {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}
