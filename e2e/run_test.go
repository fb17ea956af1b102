package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
	"golang.org/x/sys/unix"
)

// envScript prints the variables a worker must get, one "rank:NAME=value" line each.
const envScript = `for v in RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT ` +
	`OMPI_COMM_WORLD_RANK MUSTER_NNODES MUSTER_NODE_RANK NCCL_COMM_ID CUDA_VISIBLE_DEVICES MUSTER_LOCAL_GPUS ` +
	`OMP_NUM_THREADS TORCHELASTIC_RUN_ID MUSTER_STORE_ADDR FROM_X PASSED; do ` +
	`eval "isset=\${$v+x}"; [ -n "$isset" ] && eval "echo \"$RANK:$v=\$$v\""; done; ` +
	`echo "$RANK:IDLEN=${#MUSTER_NCCL_UNIQUE_ID}"; echo "$RANK:HOSTFILE=$(cat "$MUSTER_HOSTFILE")"`

// workerEnv parses envScript's output (untagged) into rank -> NAME -> value.
func workerEnv(t *testing.T, stdout string) map[string]map[string]string {
	t.Helper()
	env := map[string]map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		rank, kv, ok := strings.Cut(l, ":")
		name, value, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 {
			t.Fatalf("odd line %q", l)
		}
		if env[rank] == nil {
			env[rank] = map[string]string{}
		}
		env[rank][name] = value
	}
	return env
}

func checkFourWorkers(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	env := workerEnv(t, r.stdout)
	if len(env) != 4 {
		t.Fatalf("got ranks %v, want 0..3", env)
	}
	port := env["0"]["MASTER_PORT"]
	for rank := 0; rank < 4; rank++ {
		e := env[fmt.Sprint(rank)]
		want := map[string]string{
			"RANK": fmt.Sprint(rank), "LOCAL_RANK": fmt.Sprint(rank), "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4",
			"GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMPI_COMM_WORLD_RANK": fmt.Sprint(rank),
			"MUSTER_NNODES": "1", "MUSTER_NODE_RANK": "0", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
			"IDLEN": "256", "HOSTFILE": "127.0.0.1 slots=4", "FROM_X": "x-value", "PASSED": "passed-value",
		}
		for k, v := range want {
			if e[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, e[k], v)
			}
		}
		_, hasCommID := e["NCCL_COMM_ID"]
		if hasCommID != (rank == 0) {
			t.Errorf("rank %d: NCCL_COMM_ID set=%v; only rank 0 gets it", rank, hasCommID)
		}
		if e["TORCHELASTIC_RUN_ID"] == "" || e["TORCHELASTIC_RUN_ID"] != env["0"]["TORCHELASTIC_RUN_ID"] {
			t.Errorf("rank %d: run id %q", rank, e["TORCHELASTIC_RUN_ID"])
		}
	}
	if port == "" || port == "0" || env["0"]["NCCL_COMM_ID"] == "127.0.0.1:"+port {
		t.Errorf("MASTER_PORT %q and NCCL_COMM_ID %q must be two reserved ports", port, env["0"]["NCCL_COMM_ID"])
	}
}

func TestFourWorkersGetRanksAndEnvironment(t *testing.T) {
	t.Parallel()
	cmd, out, errb := launcher(t, []string{"PASSED=passed-value"}, "run", "--nproc", "4", "--no-tag-output", "-x", "FROM_X=x-value", "-x", "PASSED", "--", "sh", "-c", envScript)
	checkFourWorkers(t, wait(t, cmd, out, errb))
}

func TestClusterAgentRunsTheSameJob(t *testing.T) {
	t.Parallel()
	addr := startAgent(t)
	cmd, out, errb := launcher(t, []string{"PASSED=passed-value"}, "run", "--cluster", addr, "--nproc", "4", "--no-tag-output", "-x", "FROM_X=x-value", "-x", "PASSED", "--", "sh", "-c", envScript)
	r := wait(t, cmd, out, errb)
	checkFourWorkers(t, r)
	// The store answers on the address the workers were given.
	env := workerEnv(t, r.stdout)
	if env["0"]["MUSTER_STORE_ADDR"] != addr {
		t.Errorf("MUSTER_STORE_ADDR=%q, want %q", env["0"]["MUSTER_STORE_ADDR"], addr)
	}
}

func TestGPUSplit(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--gpu-devices", "0,1,2,3", "--gpus", "4", "--nproc", "2", "--no-tag-output", "--", "sh", "-c", envScript)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	env := workerEnv(t, r.stdout)
	for rank, want := range map[string]string{"0": "0,1", "1": "2,3"} {
		if env[rank]["CUDA_VISIBLE_DEVICES"] != "0,1,2,3" || env[rank]["MUSTER_LOCAL_GPUS"] != want {
			t.Errorf("rank %s: CUDA_VISIBLE_DEVICES=%q MUSTER_LOCAL_GPUS=%q, want 0,1,2,3 and %s",
				rank, env[rank]["CUDA_VISIBLE_DEVICES"], env[rank]["MUSTER_LOCAL_GPUS"], want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"more GPUs than the node has", []string{"run", "--gpu-devices", "0,1", "--gpus", "4", "--", "true"}, 1,
			"--gpus 4: node"},
		{"GPUs on a node without any", []string{"run", "--gpus", "1", "--", "true"}, 1, "has no GPUs"},
		{"uneven split", []string{"run", "--gpus", "3", "--nproc", "2", "--", "true"}, 2, "--gpus 3 is not a multiple of --nproc 2"},
		{"several nodes without a cluster", []string{"run", "-n", "2", "--", "true"}, 2, "--nnodes 2 needs a cluster"},
		{"unset -x variable", []string{"run", "-x", "MUSTER_SURELY_UNSET", "--", "true"}, 2, "-x MUSTER_SURELY_UNSET: MUSTER_SURELY_UNSET is not set"},
		{"no command", []string{"run"}, 2, "no command given"},
		{"missing program", []string{"run", "--", "/nonexistent/program"}, 127, "cannot start"},
		{"a signal muster does not forward", []string{"run", "--forward-signals", "USR1,KILL", "--", "true"}, 2,
			`--forward-signals USR1,KILL: "KILL" is not a signal muster forwards`},
		{"silence without a hang timeout", []string{"run", "--hang-on-silence", "--", "true"}, 2, "--hang-on-silence needs --hang-timeout"},
		{"a hang timeout too short", []string{"run", "--hang-timeout", "10ms", "--", "true"}, 2, "--hang-timeout 10ms is outside 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runLauncher(t, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tt.code, tt.want)
			}
		})
	}
}

func TestFirstFailureStopsTheJob(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-failfast", time.Now().UnixNano())
	r := runLauncher(t, "run", "--nproc", "4", "-x", marker, "--", "sh", "-c",
		`if [ "$RANK" = 2 ]; then echo "boom from two" >&2; sleep 0.2; exit 3; fi; exec sleep 1000`)
	if r.code != 3 {
		t.Fatalf("exit %d, want 3; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"rank 2 (node", "exited with code 3", "boom from two"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stderr)
		}
	}
	if pids := jobProcesses(t, marker); len(pids) != 0 {
		t.Fatalf("workers left behind: %v", pids)
	}
}

func TestSignalExitCode(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--nproc", "2", "--", "sh", "-c", `[ "$RANK" = 1 ] && kill -SEGV $$; sleep 1000`)
	if r.code != 139 || !strings.Contains(r.stderr, "rank 1") || !strings.Contains(r.stderr, "signal 11") {
		t.Fatalf("exit %d, stderr %q; want 139 naming rank 1 and signal 11", r.code, r.stderr)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--nproc", "2", "--timeout", "300ms", "--kill-timeout", "100ms", "--", "sleep", "1000")
	if r.code != 124 || !strings.Contains(r.stderr, "timed out") {
		t.Fatalf("exit %d, stderr %q; want 124", r.code, r.stderr)
	}
}

func TestInterruptLeavesNoProcesses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		signals []syscall.Signal
		script  string
		code    int
	}{
		// sh runs sleep as a child, so the whole process group must be signalled.
		{"ctrl-c stops gracefully", []syscall.Signal{syscall.SIGINT}, `sleep 1000 & sleep 1000; wait`, 130},
		{"sigterm stops gracefully", []syscall.Signal{syscall.SIGTERM}, `sleep 1000`, 143},
		// Workers that ignore SIGTERM die on the second Ctrl-C, long before the kill timeout.
		{"second ctrl-c kills", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, `trap "" TERM; sleep 1000 & sleep 1000; wait`, 130},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := fmt.Sprintf("MUSTER_E2E_MARK=%d", time.Now().UnixNano())
			cmd := exec.Command(launcherBin, "run", "--nproc", "3", "--kill-timeout", "10m", "-x", marker, "--", "sh", "-c", tt.script)
			var out, errb testfixture.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			testwait.Until(t, 20*time.Second, "6 worker processes", func() bool { return len(jobProcesses(t, marker)) >= 6 })
			for i, sig := range tt.signals {
				cmd.Process.Signal(sig)
				// Heard before the next is sent: the kernel merges a signal
				// sent again while it is pending.
				heard := "muster: " + unix.SignalName(sig)
				testwait.UntilShowing(t, 20*time.Second, "the launcher to say it heard "+unix.SignalName(sig),
					func() bool { return strings.Count(errb.String(), heard) > i }, errb.String)
			}
			r := waitLocked(t, cmd, &out, &errb)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, tt.code, r.stderr)
			}
			if pids := jobProcesses(t, marker); len(pids) != 0 {
				t.Fatalf("processes of the job left: %v", pids)
			}
		})
	}
}

func TestKilledLauncherTakesWorkersWithIt(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-sigkill", time.Now().UnixNano())
	cmd, out, errb := launcher(t, nil, "run", "--nproc", "3", "-x", marker, "--", "sleep", "1000")
	testwait.Until(t, 20*time.Second, "3 workers", func() bool { return len(jobProcesses(t, marker)) == 3 })
	cmd.Process.Kill()
	wait(t, cmd, out, errb)
	testwait.Until(t, 20*time.Second, "workers to die with their launcher", func() bool { return len(jobProcesses(t, marker)) == 0 })
}

func TestLargeOutputArrivesWholeAndUntangled(t *testing.T) {
	t.Parallel()
	// Every rank prints 10 MB in lines of its own pattern, all at once.
	const perRank = 10 << 20
	const lineLen = 100
	n := perRank / (lineLen + 1)
	script := fmt.Sprintf(`awk -v r="$RANK" 'BEGIN { s = sprintf("%%0%dd", 0); gsub(/0/, r, s); for (i = 0; i < %d; i++) print s }'`, lineLen, n)
	logDir := t.TempDir()
	r := runLauncher(t, "run", "--nproc", "3", "--log-dir", logDir, "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	counts := map[string]int{}
	for i, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		rank, body, ok := strings.Cut(l, " ")
		want := strings.Repeat(strings.Trim(rank, "[]"), lineLen)
		if !ok || body != want {
			t.Fatalf("line %d is tangled or cut: %.80q", i, l)
		}
		counts[rank]++
	}
	for _, rank := range []string{"[0]", "[1]", "[2]"} {
		if counts[rank] != n {
			t.Errorf("%s: %d lines, want %d", rank, counts[rank], n)
		}
	}
	for rank := 0; rank < 3; rank++ {
		b, err := os.ReadFile(rankLog(t, logDir, rank))
		if err != nil || len(b) != n*(lineLen+1) {
			t.Errorf("rank %d log: %d bytes, %v; want %d", rank, len(b), err, n*(lineLen+1))
		}
	}
}

func TestLongLineWithoutNewline(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--nproc", "1", "--", "sh", "-c", `head -c 200000 /dev/zero | tr '\0' x`)
	if r.code != 0 || r.stdout != "[0] "+strings.Repeat("x", 200000)+"\n" {
		t.Fatalf("exit %d, %d bytes of output", r.code, len(r.stdout))
	}
}

// rankLog is a rank's log file of the one job that wrote to logDir.
func rankLog(t *testing.T, logDir string, rank int) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(logDir, "j-*", fmt.Sprintf("rank-%d.log", rank)))
	if len(files) != 1 {
		t.Fatalf("rank %d: log files %v, want one", rank, files)
	}
	return files[0]
}

// The agent refuses a bad flag before it starts anything, with exit 2.
func TestAgentUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-addr", "bogus"}, `--metrics-addr (MUSTER_METRICS_ADDR) "bogus": want HOST:PORT`},
		{[]string{"--metrics-addr", "127.0.0.1:99999"}, `port "99999" is not a number from 0 to 65535`},
		{[]string{"run", "--metrics-addr", "x:y", "--", "true"}, `--metrics-addr (MUSTER_METRICS_ADDR) "x:y"`},
	} {
		out, err := exec.Command(agentBin, tt.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tt.want) {
			t.Errorf("agent %s: %v, output %q; want exit 2 and %q", strings.Join(tt.args, " "), err, out, tt.want)
		}
	}
}

// A failed Python rank's exception, as torch.distributed.elastic's @record
// writes it to TORCHELASTIC_ERROR_FILE, is in the summary and the events'
// end, as torchrun shows it.
func TestPythonErrorInTheSummary(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	events := filepath.Join(t.TempDir(), "events")
	r := runLauncher(t, "run", "--nproc", "2", "--events", events, "-x", "FAIL_RANK=1", "--", python, "testdata/record.py")
	want := regexp.MustCompile(`rank 1 \(node \S+, local rank 1\) exited with code 1: ValueError: batch 41 has 3 columns, want 4, ` +
		`raised at File "\S+record.py", line \d+, in load: raise ValueError\(f"batch \{batch\} has 3 columns, want 4"\)`)
	if r.code != 1 || !want.MatchString(r.stderr) {
		t.Fatalf("exit %d, want 1 and the exception in the summary; stderr:\n%s", r.code, r.stderr)
	}
	if e := readFile(t, events); !strings.Contains(e, `"pythonError":{"type":"ValueError","message":"batch 41 has 3 columns, want 4","frames":[`) {
		t.Errorf("the events' end lacks the exception:\n%s", e)
	}
}
