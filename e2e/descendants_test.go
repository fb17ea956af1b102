package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// No descendant of a worker outlives its job, whatever ends the launcher,
// and the job's directory goes with it.
func TestNoDescendantOutlivesTheLauncher(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		signal syscall.Signal // sent to the launcher once the job runs; 0 lets it end
		code   int            // the launcher's exit code; -1 when killed
	}{
		// python left running under init after each of these before.
		{"sighup", `python3 -c "import time; time.sleep(60)"; echo`, syscall.SIGHUP, 129},
		{"sigterm", `python3 -c "import time; time.sleep(60)"; echo`, syscall.SIGTERM, 143},
		{"sigkill", `python3 -c "import time; time.sleep(60)"; echo`, syscall.SIGKILL, -1},
		{"setsid child of a clean job", `setsid sleep 1000 & sleep 0.5; echo done`, 0, 0},
		{"double fork of a clean job", `(sh -c 'sleep 1000 &' &); sleep 0.5; echo done`, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			marker := fmt.Sprintf("MUSTER_E2E_MARK=%d", time.Now().UnixNano())
			cmd, out, errb := launcher(t, []string{"TMPDIR=" + tmp}, "run", "--nproc", "2", "--kill-timeout", "2s",
				"-x", marker, "--", "bash", "-c", tt.script)
			testwait.Until(t, 20*time.Second, "the workers' children", func() bool { return len(jobProcesses(t, marker)) >= 4 })
			if tt.signal != 0 {
				cmd.Process.Signal(tt.signal)
			}
			r := wait(t, cmd, out, errb)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, tt.code, r.stderr)
			}
			testwait.Until(t, 20*time.Second, "every process of the job to end", func() bool { return len(jobProcesses(t, marker)) == 0 })
			testwait.Until(t, 20*time.Second, "the job directory to go", func() bool {
				m, _ := filepath.Glob(filepath.Join(tmp, "muster-sock-*", "muster-j-*"))
				return len(m) == 0
			})
		})
	}
}

// A background child of a worker that exited 0 gets SIGTERM and the kill
// timeout to finish, not an instant SIGKILL.
func TestBackgroundChildGetsTheGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := fmt.Sprintf(`sh -c 'trap "sleep 0.5; echo bye > %s/term-$RANK; exit 0" TERM; while :; do sleep 0.05; done' & sleep 0.3; exit 0`, dir)
	r := runLauncher(t, "run", "--nproc", "2", "--kill-timeout", "10s", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for rank := 0; rank < 2; rank++ {
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("term-%d", rank))); err != nil || strings.TrimSpace(string(b)) != "bye" {
			t.Errorf("rank %d's child had no time to finish after SIGTERM: %v", rank, err)
		}
	}
}

// A job directory left by a launcher killed together with its shim, in the
// launcher's private directory, goes at the next start.
func TestNextStartRemovesJobDirsLeftByACrash(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	private := filepath.Join(tmp, "muster-sock-crashed")
	stale := filepath.Join(private, "muster-j-000000000000.0")
	os.MkdirAll(stale, 0o700)
	os.WriteFile(filepath.Join(stale, ".lock"), nil, 0o600)
	os.WriteFile(filepath.Join(stale, "hostfile"), []byte("127.0.0.1 slots=1\n"), 0o600)
	old := time.Now().Add(-time.Minute)
	os.Chtimes(private, old, old)
	cmd, out, errb := launcher(t, []string{"TMPDIR=" + tmp}, "run", "--nproc", "1", "--", "true")
	if r := wait(t, cmd, out, errb); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale job directory still there: %v", err)
	}
}
