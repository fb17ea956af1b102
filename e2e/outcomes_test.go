package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// SIGTERM to the agent that hosts the store fails the running job, naming
// the agent; it was recorded as a success before.
func TestAgentShutdownFailsItsJob(t *testing.T) {
	t.Parallel()
	ap := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "head-node", "--kill-timeout", "2s"})
	cmd, out, errb := launcher(t, nil, "run", "--cluster", ap.addr, "--nproc", "2", "--", "sleep", "1000")
	testwait.Until(t, 20*time.Second, "the job to run", func() bool { return strings.Contains(runLauncher(t, "jobs", "--cluster", ap.addr).stdout, "running") })
	ap.cmd.Process.Signal(syscall.SIGTERM)
	r := wait(t, cmd, out, errb)
	if r.code == 0 || !strings.Contains(r.stderr, "the agent on node head-node shut down") {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
}

// A launcher whose store stops answering says so within seconds (it waited
// 46 s without a word before), follows the job again once the store
// answers, and exits with the job's code.
func TestLauncherNoticesAStoreThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	ap := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), nil)
	dir := t.TempDir()
	// The job ends only once the test says so: a loaded machine may take
	// long to get here, and the job must still run when the store stops.
	cmd := exec.Command(launcherBin, "run", "--cluster", ap.addr, "--nproc", "1", "--", "sh", "-c",
		"while [ ! -e "+dir+"/go ]; do sleep 0.1; done; exit 3")
	var errb testfixture.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	testwait.Until(t, 20*time.Second, "the job to run", func() bool { return strings.Contains(runLauncher(t, "jobs", "--cluster", ap.addr).stdout, "running") })
	ap.cmd.Process.Signal(syscall.SIGSTOP)
	defer ap.cmd.Process.Signal(syscall.SIGCONT)
	testwait.Until(t, 20*time.Second, "the launcher to say it lost the store", func() bool {
		return strings.Contains(errb.String(), "muster: lost the store at "+ap.addr)
	})
	ap.cmd.Process.Signal(syscall.SIGCONT)
	os.WriteFile(dir+"/go", nil, 0o644)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("exit %d (%v), want the job's 3; stderr:\n%s", code, err, errb.String())
	}
}

// A launcher suspended with Ctrl-Z keeps its job: when it resumes, the job
// goes on and ends as it would have. The workers say when the launcher has
// been stopped longer than anything that could take it for gone: gRPC's
// keepalive (5 s and 5 s) and the store's session grace (10 s).
func TestSuspendedLauncherKeepsItsJob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := fmt.Sprintf(`seq 1 1000; sleep 12; touch %[1]s/slept-$RANK; while [ ! -e %[1]s/go ]; do sleep 0.05; done; echo end`, dir)
	cmd, out, errb := launcher(t, nil, "run", "--nproc", "2", "--", "sh", "-c", script)
	testwait.Until(t, 20*time.Second, "output", func() bool {
		s := out.String()
		return strings.Contains(s, "[0] 1000\n") && strings.Contains(s, "[1] 1000\n")
	})
	cmd.Process.Signal(syscall.SIGSTOP)
	testwait.Until(t, time.Minute, "the workers to outlast the timeouts", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "slept-*"))
		return len(m) == 2
	})
	cmd.Process.Signal(syscall.SIGCONT)
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	r := wait(t, cmd, out, errb)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2002 || strings.Count(r.stdout, " end\n") != 2 {
		t.Fatalf("exit %d, %d lines; stderr:\n%s", r.code, strings.Count(r.stdout, "\n"), r.stderr)
	}
}

// A second agent under a name a live agent holds is refused and exits,
// rather than the two evicting each other forever.
func TestSecondAgentOfOneNameIsRefused(t *testing.T) {
	t.Parallel()
	ap := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "twin"})
	out, err := runAgentOnce(t, "--store", ap.addr, "--name", "twin", "--addr", "127.0.0.2")
	if err == nil || !strings.Contains(out, "registered by another agent, which is connected: give this agent another --name") {
		t.Fatalf("second agent: %v\n%s", err, out)
	}
}
