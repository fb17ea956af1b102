package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// The restart policy on the embedded default: an exit code the program
// says means "do not restart" (ft_launcher's 93), --restart-on node-loss,
// and the back-off between restarts, each restart's cause printed and every
// round's cause named at the end.
func TestRestartPolicy(t *testing.T) {
	t.Parallel()
	t.Run("exit code 93 is not restarted", func(t *testing.T) {
		r := runLauncher(t, "run", "--max-restarts", "3", "--no-restart-exit-codes", "93", "--no-tag-output", "--",
			"sh", "-c", `echo "round $TORCHELASTIC_RESTART_COUNT"; exit 93`)
		if r.code != 93 || r.stdout != "round 0\n" {
			t.Fatalf("exit %d, stdout %q, want 93 after one round; stderr:\n%s", r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "exited with code 93 (exit code 93 is one of --no-restart-exit-codes: not restarted)\n") {
			t.Fatalf("stderr does not say why it was not restarted:\n%s", r.stderr)
		}
	})
	t.Run("another code is restarted", func(t *testing.T) {
		r := runLauncher(t, "run", "--max-restarts", "1", "--no-restart-exit-codes", "93", "--restart-backoff", "0", "--no-tag-output", "--",
			"sh", "-c", `echo "round $TORCHELASTIC_RESTART_COUNT"; exit 94`)
		if r.code != 94 || r.stdout != "round 0\nround 1\n" {
			t.Fatalf("exit %d, stdout %q, want 94 after two rounds; stderr:\n%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("node-loss only", func(t *testing.T) {
		r := runLauncher(t, "run", "--max-restarts", "2", "--restart-on", "node-loss", "--no-tag-output", "--",
			"sh", "-c", `echo "round $TORCHELASTIC_RESTART_COUNT"; exit 4`)
		if r.code != 4 || r.stdout != "round 0\n" || !strings.Contains(r.stderr, "(--restart-on node-loss: a failed worker is not restarted)") {
			t.Fatalf("exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("back-off and every round's cause", func(t *testing.T) {
		start := time.Now()
		r := runLauncher(t, "run", "--max-restarts", "2", "--restart-backoff", "300ms", "--", "sh", "-c", "exit 3")
		took := time.Since(start)
		if r.code != 3 {
			t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
		}
		// The causes are the worker's; its node's name is the machine's.
		who := `rank 0 \(node [^,]+, local rank 0\) exited with code 3`
		want := regexp.MustCompile(`(?s)` +
			`muster: round 0 stops: ` + who + `; restart 1 of 2 \(--max-restarts\), the next round in 300ms \(--restart-backoff\)\n` +
			`muster: round 1 stops: ` + who + `; restart 2 of 2 \(--max-restarts\), the next round in 600ms \(--restart-backoff\)\n` +
			`muster: job j-\S+ failed: ` + who + `\n` +
			`muster: job j-\S+ ran 3 rounds:\n` +
			`    round 0: ` + who + `\n` +
			`    round 1: ` + who + `\n` +
			`    round 2: failed: ` + who + `\n$`)
		if !want.MatchString(r.stderr) {
			t.Fatalf("stderr:\n%s\nwant it to match %s", r.stderr, want)
		}
		if took < 900*time.Millisecond {
			t.Fatalf("three rounds took %s, less than their back-offs of 900ms", took)
		}
	})
	t.Run("a restart cut short in its back-off", func(t *testing.T) {
		r := runLauncher(t, "run", "--max-restarts", "1", "--restart-backoff", "1m", "--timeout", "1s", "--", "sh", "-c", "exit 3")
		who := `rank 0 \(node [^,]+, local rank 0\) exited with code 3`
		want := regexp.MustCompile(`(?s)muster: job j-\S+ ran 1 round:\n` +
			`    round 0: ` + who + `\n` +
			`    round 1: not started: cancelled: timed out after 1s\n$`)
		if r.code != 124 || !want.MatchString(r.stderr) {
			t.Fatalf("exit %d, stderr:\n%s\nwant 124 and a match for %s", r.code, r.stderr, want)
		}
	})
}

// A job's own --health-check runs on its node before the workers start; a
// node where it fails is left out, and the embedded default has no other.
func TestJobHealthCheckFails(t *testing.T) {
	t.Parallel()
	r := runLauncher(t, "run", "--health-check", `echo "no scratch space for $MUSTER_JOB_ID"; exit 1`, "--", "echo", "ran")
	if r.code != 1 || strings.Contains(r.stdout, "ran") {
		t.Fatalf("exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(`failed its health check \(job command\): .* exited with code 1 after \S+: no scratch space for j-`).MatchString(r.stderr) {
		t.Fatalf("stderr does not name the check and its output:\n%s", r.stderr)
	}
}

// Ctrl-C during a node's health check stops the job without waiting for
// the check's end (here ten minutes away), and leaves no check behind.
func TestStopDuringHealthCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	marker := fmt.Sprintf("muster-health-%d", time.Now().UnixNano())
	cmd, out, errb := launcher(t, nil, "run", "--health-check-timeout", "10m",
		"--health-check", fmt.Sprintf(`touch %s; exec sleep 600 # %s`, started, marker), "--", "echo", "ran")
	testwait.Until(t, 20*time.Second, "the health check running", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r := wait(t, cmd, out, errb)
	if r.code != 130 || strings.Contains(r.stdout, "ran") {
		t.Fatalf("exit %d, stdout %q, want 130 without the workers; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	testwait.Until(t, 20*time.Second, "the health check gone", func() bool {
		b, _ := exec.Command("pgrep", "-f", marker).Output()
		return len(strings.TrimSpace(string(b))) == 0
	})
}
