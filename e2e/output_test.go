package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/testwait"
)

// countLines counts the lines of each rank in tagged output and checks that
// every line is whole: its rank's tag, then what that rank printed.
func countLines(t *testing.T, out string, check func(rank int, body string) bool) map[int]int {
	t.Helper()
	counts := map[int]int{}
	for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		tag, body, ok := strings.Cut(l, " ")
		rank, err := strconv.Atoi(strings.Trim(tag, "[]"))
		if !ok || err != nil || !check(rank, body) {
			t.Fatalf("line %d is not a whole tagged line: %.80q", i, l)
		}
		counts[rank]++
	}
	return counts
}

// Output is never lost, at the sizes users run: every line of every rank, in
// the terminal and in the log files.
func TestNoOutputLostAtScale(t *testing.T) {
	t.Parallel()
	tests := []struct {
		workers, lines int
		tagged         bool
	}{
		// 632774 of 640000 lines arrived before, with exit code 0.
		{32, 20000, false},
		{64, 20000, false},
		{256, 5000, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d workers", tt.workers), func(t *testing.T) {
			logDir := t.TempDir()
			args := []string{"run", "--nproc", strconv.Itoa(tt.workers), "--log-dir", logDir}
			if !tt.tagged {
				args = append(args, "--no-tag-output")
			}
			r := runLauncher(t, append(args, "--", "seq", "1", strconv.Itoa(tt.lines))...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got, want := strings.Count(r.stdout, "\n"), tt.workers*tt.lines; got != want {
				t.Fatalf("%d lines in the terminal, want %d", got, want)
			}
			if tt.tagged {
				counts := countLines(t, r.stdout, func(_ int, body string) bool { n, err := strconv.Atoi(body); return err == nil && n >= 1 })
				for rank := 0; rank < tt.workers; rank++ {
					if counts[rank] != tt.lines {
						t.Fatalf("rank %d: %d lines, want %d", rank, counts[rank], tt.lines)
					}
				}
			}
			var want bytes.Buffer
			for i := 1; i <= tt.lines; i++ {
				fmt.Fprintf(&want, "%d\n", i)
			}
			for rank := 0; rank < tt.workers; rank++ {
				b, err := os.ReadFile(rankLog(t, logDir, rank))
				if err != nil || !bytes.Equal(b, want.Bytes()) {
					t.Fatalf("rank %d's log file: %d bytes (%v), want %d", rank, len(b), err, want.Len())
				}
			}
		})
	}
}

// A reader that stops reading stops the workers, as a terminal does, and
// then gets every line.
func TestSlowReaderSlowsWorkers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// 2 × 48 MiB is more than the launcher, store and agent buffer together.
	const lines = 48 << 20 / 100
	cmd := exec.Command(launcherBin, "run", "--nproc", "2", "--", "sh", "-c",
		fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x | fold -w 99; touch %s/done-$RANK`, lines*99, dir))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill() })
	br := bufio.NewReader(r)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// Nobody reads for a while: the workers must be held back, not finish
	// into a buffer (nor lose lines).
	time.Sleep(3 * time.Second)
	if m, _ := filepath.Glob(filepath.Join(dir, "done-*")); len(m) != 0 {
		t.Fatalf("workers finished while nobody read their output: %v", m)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("launcher: %v\n%s", err, errb.String())
	}
	if got, want := 1+strings.Count(string(rest), "\n"), 2*lines; got != want {
		t.Fatalf("%d lines, want %d", got, want)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "done-*")); len(m) != 2 {
		t.Fatalf("workers did not finish: %v", m)
	}
}

// A progress bar drawn with \r and no newline shows up as it is drawn.
func TestProgressBarShowsBeforeItsNewline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(launcherBin, "run", "--nproc", "1", "--", "sh", "-c",
		fmt.Sprintf(`printf '\r50%%%%'; while [ ! -e %s/go ]; do sleep 0.05; done; printf '\r100%%%%\n'`, dir))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	seen := make(chan string, 1)
	go func() {
		var got []byte
		buf := make([]byte, 256)
		for {
			n, err := out.Read(buf)
			got = append(got, buf[:n]...)
			if bytes.Contains(got, []byte("50%")) || err != nil {
				seen <- string(got)
				io.Copy(io.Discard, out)
				return
			}
		}
	}()
	select {
	case got := <-seen:
		if got != "\r[0] 50%" {
			t.Fatalf("before the newline: %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an unfinished line never showed")
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// One job's stalled reader holds up that job only.
func TestStalledLauncherHoldsUpOnlyItsJob(t *testing.T) {
	t.Parallel()
	addr := startAgent(t)
	// A launcher whose stdout nobody reads, with a job that writes a lot.
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-stalled", time.Now().UnixNano())
	slow := exec.Command(launcherBin, "run", "--cluster", addr, "--nproc", "1", "-x", marker, "--", "sh", "-c", `yes 0123456789abcdef | head -c 200000000`)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	slow.Stdout = w
	if err := slow.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	slowDone := make(chan struct{})
	go func() { slow.Wait(); close(slowDone) }()
	t.Cleanup(func() { slow.Process.Kill(); <-slowDone })
	// The launcher's stdout is full: it writes no more, and its job waits.
	capacity, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the stalled launcher's stdout to fill", func() bool {
		n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ) // FIONREAD: the bytes in the pipe
		return err == nil && n >= capacity-4096
	})
	res := runLauncher(t, "run", "--cluster", addr, "--nproc", "2", "--", "seq", "1", "1000")
	if res.code != 0 || strings.Count(res.stdout, "\n") != 2000 {
		t.Fatalf("another job: exit %d, %d lines; %s", res.code, strings.Count(res.stdout, "\n"), res.stderr)
	}
	// The first job stalled meanwhile: its worker still runs, held back by
	// its reader, and its launcher still follows it.
	select {
	case <-slowDone:
		t.Fatalf("the stalled launcher ended: %v", slow.ProcessState)
	default:
	}
	if len(jobProcesses(t, marker)) == 0 {
		t.Fatal("the stalled job's worker finished: its output was not held back")
	}
}

// Two jobs writing to the same --log-dir keep each its own files.
func TestJobsNeverOverwriteEachOthersLogs(t *testing.T) {
	t.Parallel()
	logDir := t.TempDir()
	for i := 0; i < 2; i++ {
		r := runLauncher(t, "run", "--nproc", "2", "--log-dir", logDir, "--", "sh", "-c", fmt.Sprintf("echo job%d", i))
		if r.code != 0 || !strings.Contains(r.stderr, "logs to "+logDir+"/j-") {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	}
	files, _ := filepath.Glob(filepath.Join(logDir, "j-*", "rank-*.log"))
	var all []string
	for _, f := range files {
		if strings.HasSuffix(f, ".err.log") {
			continue // stderr's, empty
		}
		b, _ := os.ReadFile(f)
		all = append(all, strings.TrimSpace(string(b)))
	}
	if strings.Join(all, " ") != "job0 job0 job1 job1" && strings.Join(all, " ") != "job1 job1 job0 job0" {
		t.Fatalf("logs: %v %q", files, all)
	}
}

// A closed stdout (`| head -1`) stops the job, as SIGPIPE stops a pipeline,
// and leaves nothing running.
func TestClosedStdoutStopsTheJob(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-pipe", time.Now().UnixNano())
	// python is the worker's child: the launcher killed by SIGPIPE left it
	// running under init before.
	cmd := exec.Command("sh", "-c", launcherBin+` run --nproc 2 -x `+marker+
		` -- bash -c 'python3 -c "import time; time.sleep(60)" & sleep 0.5; seq 1 100000; wait' | head -1`)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := wait(t, cmd, &out, &errb)
	if r.stdout != "[0] 1\n" && r.stdout != "[1] 1\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	testwait.Until(t, 20*time.Second, "the job's processes to end", func() bool { return len(jobProcesses(t, marker)) == 0 })
}

// A worker that pauses in the middle of a line (a block-buffered program
// between two blocks) never has that line split or changed in a pipe or a
// file: only a line drawn with \r shows before it ends.
func TestPausedWriterKeepsItsLinesWhole(t *testing.T) {
	t.Parallel()
	script := `import sys, time
for i in range(3000):
    sys.stdout.write("%d\n" % i)
    if i % 400 == 0:
        time.sleep(0.3)
`
	r := runLauncher(t, "run", "--nproc", "2", "--", "python3", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	next := map[int]int{}
	countLines(t, r.stdout, func(rank int, body string) bool {
		n, err := strconv.Atoi(body)
		if err != nil || n != next[rank] {
			return false
		}
		next[rank]++
		return true
	})
	if next[0] != 3000 || next[1] != 3000 {
		t.Fatalf("lines: %v", next)
	}
}

// A restarted job's rounds write after one another in each rank's
// --log-dir files: the restart neither fails on the file nor loses the
// first round's lines.
func TestLogDirAcrossRestarts(t *testing.T) {
	t.Parallel()
	logDir := t.TempDir()
	// In round 0, rank 1 fails once rank 0's lines are in its files, and rank
	// 0 waits to be stopped; in round 1 both succeed.
	script := fmt.Sprintf(`echo "round $TORCHELASTIC_RESTART_COUNT"; echo "err $TORCHELASTIC_RESTART_COUNT" >&2
	[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] && exit 0
	[ "$RANK" = 0 ] && exec sleep 100
	until grep -qs "round 0" %[1]s/j-*/rank-0.log && grep -qs "err 0" %[1]s/j-*/rank-0.err.log; do sleep 0.01; done
	exit 3`, logDir)
	r := runLauncher(t, "run", "--nproc", "2", "--max-restarts", "1", "--restart-backoff", "0", "--log-dir", logDir, "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for rank := range 2 {
		out := rankLog(t, logDir, rank)
		if got := readFile(t, out); got != "round 0\nround 1\n" {
			t.Errorf("rank %d's stdout log %q, want both rounds'", rank, got)
		}
		if got := readFile(t, strings.TrimSuffix(out, ".log")+".err.log"); got != "err 0\nerr 1\n" {
			t.Errorf("rank %d's stderr log %q, want both rounds'", rank, got)
		}
	}
}
