package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A Python rank that stops giving heartbeats is found hung: the job stops,
// the summary names it, how long it was silent and the ranks that waited,
// and its log holds every thread's stack, printed by Python's faulthandler
// on the agent's SIGABRT. PyTorch's flight recorder (its pipe and dump
// file, as the script mimics them) is dumped into the job's log directory
// before, for the hung rank and the waiting ones.
func TestHungPythonRankIsStoppedWithItsStacks(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the Python stacks of a hung rank need Python")
	}
	timedAlone(t)
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-hang", time.Now().UnixNano())
	logDir := t.TempDir()
	r := runLauncher(t, "run", "--nproc", "4", "--hang-timeout", "5s", "--hang-first-timeout", "60s", "--log-dir", logDir, "-x", marker, "-x", "HANG_RANK=1",
		"--", python, "testdata/hang.py")
	if r.code != 134 {
		t.Fatalf("exit %d, want 134 (SIGABRT); stderr:\n%s", r.code, r.stderr)
	}
	summary := regexp.MustCompile(`muster: job (j-\S+) failed: rank 1 \(node \S+, local rank 1\) hung: no heartbeat for (\d+\.\d) s ` +
		`\(--hang-timeout 5s\); ranks 0, 2, 3 were waiting; evidence: heartbeats \([^)]*\); its NCCL flight recorder is in ([^;\s]+)`)
	m := summary.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no summary naming the hung rank and the waiting ones; stderr:\n%s", r.stderr)
	}
	job, trace := m[1], m[3]
	if want := filepath.Join(logDir, job, "nccl-trace-rank-1"); trace != want {
		t.Errorf("flight recorder in %s, want %s", trace, want)
	}
	for rank := range 4 {
		b, err := os.ReadFile(filepath.Join(logDir, job, fmt.Sprintf("nccl-trace-rank-%d", rank)))
		if err != nil || string(b) != fmt.Sprintf("flight recorder of rank %d\n", rank) {
			t.Errorf("rank %d's flight recorder: %q, %v", rank, b, err)
		}
	}
	// Python's fault handler writes the stacks to stderr: rank-1.err.log.
	log := readFile(t, strings.TrimSuffix(rankLog(t, logDir, 1), ".log")+".err.log")
	for _, want := range []string{"Fatal Python error: Aborted", "in stuck_in_all_reduce", "in helper_thread_waits"} {
		if !strings.Contains(log, want) {
			t.Errorf("rank 1's stderr log lacks %q:\n%s", want, log)
		}
	}
	if testing.Verbose() {
		t.Logf("stderr:\n%s", r.stderr)
	}
	if strings.Contains(readFile(t, strings.TrimSuffix(rankLog(t, logDir, 0), ".log")+".err.log"), "Fatal Python error") {
		t.Error("a waiting rank was aborted too")
	}
	if pids := jobProcesses(t, marker); len(pids) != 0 {
		t.Fatalf("workers left behind: %v", pids)
	}
}

// Hangs of programs that are not Python: a rank that never gives its first
// heartbeat, one that falls silent under --hang-on-silence, and a hang that
// counts as a failure for --max-restarts.
func TestHungRankStopsTheJob(t *testing.T) {
	t.Parallel()
	beat := `while :; do touch "$MUSTER_HEARTBEAT_FILE"; sleep 0.05; done`
	tests := []struct {
		name   string
		args   []string
		script string
		code   int
		want   []string
	}{
		{"no first heartbeat", []string{"--hang-timeout", "30s", "--hang-first-timeout", "2s"},
			`[ "$RANK" = 2 ] && exec sleep 1000; ` + beat, 134,
			[]string{"rank 2 (node", "hung: no first heartbeat in 2.", "(--hang-first-timeout 2s); ranks 0, 1 were waiting"}},
		{"silence under --hang-on-silence", []string{"--hang-timeout", "2s", "--hang-first-timeout", "30s", "--hang-on-silence"},
			`while :; do echo tick; [ "$RANK" = 0 ] && exec sleep 1000; sleep 0.05; done`, 134,
			[]string{"rank 0 (node", "hung: no heartbeat for 2.", "(--hang-timeout 2s); ranks 1, 2 were waiting"}},
		{"a hang is a failure for --max-restarts", []string{"--hang-timeout", "2s", "--hang-first-timeout", "30s", "--max-restarts", "1"},
			`touch "$MUSTER_HEARTBEAT_FILE"; [ "$RANK" = 1 ] && exec sleep 1000; ` + beat, 134,
			[]string{"round 0 stops: rank 1 (node", "restart 1 of 1 (--max-restarts)", "job j-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			timedAlone(t)
			marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-hang", time.Now().UnixNano())
			args := append(append([]string{"run", "--nproc", "3", "--kill-timeout", "1s", "-x", marker}, tt.args...), "--", "sh", "-c", tt.script)
			r := runLauncher(t, args...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, tt.code, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if pids := jobProcesses(t, marker); len(pids) != 0 {
				t.Fatalf("workers left behind: %v", pids)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A rank hung on one host of two: the summary names the waiting ranks of
// both hosts, and the other host dumps its ranks' flight recorders before
// its stop.
func TestNetnsHungRankDumpsEveryNode(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the Python stacks of a hung rank need Python")
	}
	script, err := filepath.Abs("testdata/hang.py")
	if err != nil {
		t.Fatal(err)
	}
	nw := newNetwork(t, 2)
	nw.startCluster()
	logDir := t.TempDir()
	r := nw.run("run", "-n", "2", "--nproc", "2", "--hang-timeout", "5s", "--hang-first-timeout", "60s", "--log-dir", logDir,
		"-x", "HANG_RANK=1", "--", python, script)
	if r.code != 134 || !strings.Contains(r.stderr, "rank 1 (node a, local rank 1) hung: no heartbeat for") ||
		!strings.Contains(r.stderr, "ranks 0, 2, 3 were waiting") {
		t.Fatalf("exit %d, want 134 naming rank 1 on node a and the waiting ranks; stderr:\n%s", r.code, r.stderr)
	}
	for rank := range 4 {
		files, _ := filepath.Glob(filepath.Join(logDir, "j-*", fmt.Sprintf("nccl-trace-rank-%d", rank)))
		if len(files) != 1 || readFile(t, files[0]) != fmt.Sprintf("flight recorder of rank %d\n", rank) {
			t.Errorf("rank %d's flight recorder: %v", rank, files)
		}
	}
}

// Ranks blocked writing because whoever reads the launcher's output is slow
// (muster's own flow control) are not hung: the time their output is held
// up counts as progress.
func TestSlowReaderIsNoHang(t *testing.T) {
	t.Parallel()
	// Each rank beats and writes 48 KiB every 10 ms for 3 s.
	flood := `import os, sys, time
beat = os.environ["MUSTER_HEARTBEAT_FILE"]
end = time.time() + 3
while time.time() < end:
    os.utime(beat)
    sys.stdout.write(("x" * 1023 + "\n") * 48)
    sys.stdout.flush()
    time.sleep(0.01)
`
	cmd := exec.Command(launcherBin, "run", "--nproc", "2", "--hang-timeout", "1s", "--hang-first-timeout", "30s", "--", "python3", "-c", flood)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	// Nobody reads for 5 s: the pipe fills, then the launcher's and the
	// agent's buffers, then the ranks' pipes.
	first := make([]byte, 1)
	if _, err := io.ReadFull(out, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	n, _ := io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v after %d bytes; stderr:\n%s", err, n+1, errb.String())
	}
}

// Who hung, by heartbeats alone, on one node: the rank silent first by
// more than the heartbeats' resolution is named, with the ranks that
// waited; ranks silent together are not told apart; a rank that spins
// while beating is never named; a stopped process is named, and ends.
func TestHangVerdictByHeartbeats(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the beating script needs Python")
	}
	fixtures, err := filepath.Abs("../flightrec/testdata")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, mode string
		want       string
		never      string
		args       []string
	}{
		{"rank 2 silent 50 ms first", "lead",
			`rank 2 \(node \S+, local rank 2\) hung: no heartbeat for \d+\.\d s \(--hang-timeout 2s\); ranks 0, 1, 3 were waiting; evidence: heartbeats`, "", nil},
		{"all silent within 1 ms", "together",
			`ranks 0, 1, 2, 3 hung, and heartbeats cannot tell which rank hung first: they went silent within 20 ms of each other; no heartbeat for`, "", nil},
		{"a spinning rank", "spin",
			`ranks 0, 1, 3 hung, and heartbeats cannot tell which rank hung first`, "rank 2 (", nil},
		{"a stopped process, its heartbeat with the others'", "stop",
			`rank 2 \(node \S+, local rank 2\) hung: its process was stopped \(SIGSTOP or a debugger\), so it entered no collective; no heartbeat for \d+\.\d s ` +
				`\(--hang-timeout 2s\); ranks 0, 1, 3 were waiting; evidence: its process's state`, "", nil},
		// The heartbeats cannot tell, and PyTorch's flight recorders can:
		// ranks 0, 1 and 3 wait in all_reduce #21, rank 2 completed #20.
		{"the flight recorders, where heartbeats cannot tell", "together",
			`rank 2 \(node \S+, local rank 2\) hung: it never entered nccl:all_reduce #21 of process group 0 \(default_pg\); no heartbeat for \d+\.\d s ` +
				`\(--hang-timeout 2s\); ranks 0, 1, 3 were waiting; evidence: PyTorch's flight recorders; its NCCL flight recorder is in \S+nccl-trace-rank-2`, "",
			[]string{"-x", "FR_FIXTURES=" + fixtures, "--log-dir", t.TempDir()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			timedAlone(t)
			marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-verdict", time.Now().UnixNano())
			// A first heartbeat may come late on a loaded machine: that is
			// not what is tested.
			args := append([]string{"run", "--nproc", "4", "--hang-timeout", "2s", "--hang-first-timeout", "60s", "--kill-timeout", "1s", "-x", marker,
				"-x", "BEAT_MODE=" + tt.mode}, tt.args...)
			r := runLauncher(t, append(args, "--", python, "testdata/beats.py")...)
			if r.code != 134 {
				t.Fatalf("exit %d, want 134; stderr:\n%s", r.code, r.stderr)
			}
			if !regexp.MustCompile(tt.want).MatchString(r.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.want, r.stderr)
			}
			if tt.never != "" && strings.Contains(r.stderr, tt.never) {
				t.Errorf("stderr names %q:\n%s", tt.never, r.stderr)
			}
			if pids := jobProcesses(t, marker); len(pids) != 0 {
				t.Fatalf("workers left behind: %v", pids)
			}
		})
	}
}

// Who hung, across two hosts: the culprit's host and the other give their
// clues, and the store's verdict names the culprit on host b by its
// heartbeats, 300 ms before the others', with the waiting ranks of both.
// It runs alone, before the parallel tests: their load blurs the 300 ms
// between two hosts' heartbeats.
func TestNetnsHangVerdictAcrossNodes(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the beating script needs Python")
	}
	script, err := filepath.Abs("testdata/beats.py")
	if err != nil {
		t.Fatal(err)
	}
	nw := newNetwork(t, 2)
	nw.startCluster()
	// Both nodes' last heartbeats at one moment: later than any start,
	// also on a loaded machine, where two hosts' workers take seconds.
	stopAt := fmt.Sprintf("STOP_AT=%.3f", float64(time.Now().Add(12*time.Second).UnixMilli())/1000)
	events := filepath.Join(t.TempDir(), "events")
	r := nw.run("run", "-n", "2", "--nproc", "2", "--hang-timeout", "2s", "--hang-first-timeout", "60s", "--kill-timeout", "1s", "--events", events,
		"-x", "BEAT_MODE=lead", "-x", "LEAD_RANK=3", "-x", "BEAT_GAP=0.3", "-x", stopAt, "--", python, script)
	want := regexp.MustCompile(`rank 3 \(node b, local rank 1\) hung: no heartbeat for \d+\.\d s \(--hang-timeout 2s\); ranks 0, 1, 2 were waiting; ` +
		`evidence: heartbeats \(its last \d+ ms before any other rank's\)`)
	if r.code != 134 || !want.MatchString(r.stderr) {
		t.Fatalf("exit %d, want 134 naming rank 3 on node b by its heartbeats; stderr:\n%s", r.code, r.stderr)
	}
	if e := readFile(t, events); !strings.Contains(e, `"failedRank":3,"failedNode":"b","hang":{"evidence":"heartbeats","culprits":[3],`) ||
		!strings.Contains(e, `"waiting":[0,1,2],"waitingCount":3,`) {
		t.Errorf("the events' end does not name rank 3 and the waiting ranks:\n%s", e)
	}
}
