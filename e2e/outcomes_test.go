package e2e

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGTERM to the agent that hosts the store fails the running job, naming
// the agent; it was recorded as a success before.
func TestAgentShutdownFailsItsJob(t *testing.T) {
	ap := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(freePort(t)), []string{"--name", "head-node", "--kill-timeout", "2s"})
	cmd, out, errb := launcher(t, nil, "run", "--cluster", ap.addr, "--nproc", "2", "--", "sleep", "1000")
	eventually(t, "the job to run", func() bool { return strings.Contains(runLauncher(t, "jobs", "--cluster", ap.addr).stdout, "running") })
	ap.cmd.Process.Signal(syscall.SIGTERM)
	r := wait(t, cmd, out, errb)
	if r.code == 0 || !strings.Contains(r.stderr, "the agent on node head-node shut down") {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
}

// A launcher whose store stops answering says so within seconds; it waited
// 46 s without a word before.
func TestLauncherNoticesAStoreThatStoppedAnswering(t *testing.T) {
	ap := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(freePort(t)), nil)
	cmd, out, errb := launcher(t, nil, "run", "--cluster", ap.addr, "--nproc", "1", "--", "sleep", "1000")
	eventually(t, "the job to run", func() bool { return strings.Contains(runLauncher(t, "jobs", "--cluster", ap.addr).stdout, "running") })
	ap.cmd.Process.Signal(syscall.SIGSTOP)
	defer ap.cmd.Process.Signal(syscall.SIGCONT)
	r := wait(t, cmd, out, errb)
	if r.code == 0 || !strings.Contains(r.stderr, "lost contact with the store at "+ap.addr) {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
}

// A launcher suspended with Ctrl-Z keeps its job: when it resumes, the job
// goes on and ends as it would have.
func TestSuspendedLauncherKeepsItsJob(t *testing.T) {
	cmd, out, errb := launcher(t, nil, "run", "--nproc", "2", "--", "sh", "-c", `seq 1 1000; sleep 17; echo end`)
	eventually(t, "output", func() bool { return strings.Contains(out.String(), "[1] 1000") })
	cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(16 * time.Second)
	cmd.Process.Signal(syscall.SIGCONT)
	r := wait(t, cmd, out, errb)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2002 {
		t.Fatalf("exit %d, %d lines; stderr:\n%s", r.code, strings.Count(r.stdout, "\n"), r.stderr)
	}
}
