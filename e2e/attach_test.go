package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// The launcher that submitted a job is killed; `launcher attach` follows
// the job again, prints its output from the start and ends with its code.
func TestAttachFollowsAJobWhoseLauncherIsGone(t *testing.T) {
	t.Parallel()
	store := startAgent(t)
	dir := t.TempDir()
	script := `echo first; touch ` + dir + `/started; while [ ! -e ` + dir + `/go ]; do sleep 0.05; done; echo last; exit 5`
	cmd, _, _ := launcher(t, nil, "run", "--cluster", store, "--", "sh", "-c", script)
	testwait.Until(t, 20*time.Second, "the worker to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	})
	cmd.Process.Kill()
	cmd.Wait()
	out, err := exec.Command(launcherBin, "jobs", "--cluster", store).CombinedOutput()
	if err != nil {
		t.Fatalf("jobs: %v: %s", err, out)
	}
	job := ""
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[0], "j-") && f[1] == "running" {
			job = f[0]
		}
	}
	if job == "" {
		t.Fatalf("no running job listed:\n%s", out)
	}
	acmd, aout, aerr := launcher(t, nil, "attach", job, "--cluster", store)
	// The store stops a job nobody follows after its detach grace: well after this.
	time.AfterFunc(500*time.Millisecond, func() { os.WriteFile(filepath.Join(dir, "go"), nil, 0o644) })
	res := wait(t, acmd, aout, aerr)
	if res.code != 5 || !strings.Contains(res.stdout, "first") || !strings.Contains(res.stdout, "last") {
		t.Fatalf("attach: exit %d, want 5 with the job's whole output; stdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
}
