package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// forwardScript is a worker that says when it is ready and each time
// SIGUSR1 or SIGUSR2 reaches it; SIGUSR2 also ends it. The signal goes to
// the worker's own process: its sleep, which has no handler, lives on
// until the worker ends.
const forwardScript = `trap 'echo "usr1 $RANK"' USR1; trap 'echo "usr2 $RANK"; exit 0' USR2; echo "ready $RANK"; ` +
	`while :; do sleep 0.05; done`

// signalLines counts each line of out, the launcher's tags taken off.
func signalLines(out string) map[string]int {
	n := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if _, rest, ok := strings.Cut(l, "] "); ok {
			l = rest
		}
		n[l]++
	}
	return n
}

// SIGUSR1 and SIGUSR2 sent to the launcher reach every worker of a job on
// two hosts (network namespaces) once each, and do not stop the job.
func TestNetnsForwardedSignalsReachEveryWorker(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 2)
	nw.startCluster()
	const nproc, world = 8, 16
	var out, errb testfixture.Buffer
	cmd := exec.Command("ip", "netns", "exec", nw.hosts[0].ns, launcherBin, "run", "--cluster", nw.store(), "--token-file", nw.token,
		"--tls-ca", nw.ca, "-n", "2", "--nproc", fmt.Sprint(nproc), "--", "sh", "-c", forwardScript)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	waitCount := func(what string, n int) {
		t.Helper()
		testwait.Until(t, 30*time.Second, fmt.Sprintf("%d %q lines", n, what), func() bool {
			got := 0
			for l, c := range signalLines(out.String()) {
				if strings.HasPrefix(l, what+" ") {
					got += c
				}
			}
			return got == n
		})
	}
	waitCount("ready", world)
	cmd.Process.Signal(syscall.SIGUSR1)
	waitCount("usr1", world)
	cmd.Process.Signal(syscall.SIGUSR2)
	r := waitLocked(t, cmd, &out, &errb)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if testing.Verbose() {
		t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	got := signalLines(r.stdout)
	var want []string
	for rank := range world {
		for _, w := range []string{"ready", "usr1", "usr2"} {
			l := fmt.Sprintf("%s %d", w, rank)
			want = append(want, l)
			if got[l] != 1 {
				t.Errorf("%q %d times, want once", l, got[l])
			}
		}
	}
	for l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("unexpected line %q", l)
		}
	}
	for _, sig := range []string{"SIGUSR1", "SIGUSR2"} {
		if !strings.Contains(r.stderr, "muster: "+sig+": sent to job j-") || !strings.Contains(r.stderr, "(2 nodes)") {
			t.Errorf("stderr does not say %s was sent to 2 nodes:\n%s", sig, r.stderr)
		}
	}
}

// waitLocked waits for a launcher whose output the test read as it came.
func waitLocked(t *testing.T, cmd *exec.Cmd, out, errb *testfixture.Buffer) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(hangAfter):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the launcher did not end; stderr:\n%s", errb.String())
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// Every node of an agent run job may get the platform's signal at once (as
// Slurm's --signal sends it): SIGUSR1 to both nodes reaches each worker
// once, and SIGUSR2 to the node that joined reaches the host's workers too.
func TestNetnsAgentRunForwardsSignalsOnce(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 2)
	const nproc, world = 4, 8
	var outs, errs [2]testfixture.Buffer
	var cmds [2]*exec.Cmd
	for i, h := range nw.hosts {
		cmd := exec.Command("ip", "netns", "exec", h.ns, agentBin, "run", "--rdzv", nw.hosts[0].ip, "--nnodes", "2",
			"--nproc", fmt.Sprint(nproc), "--name", h.name, "--", "sh", "-c", forwardScript)
		cmd.Env = agentEnv("TMPDIR=" + t.TempDir())
		cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		cmds[i] = cmd
	}
	out := &outs[0] // the host prints every rank's output
	waitCount := func(what string, n int) {
		t.Helper()
		testwait.Until(t, 60*time.Second, fmt.Sprintf("%d %q lines", n, what), func() bool {
			got := 0
			for l, c := range signalLines(out.String()) {
				if strings.HasPrefix(l, what+" ") {
					got += c
				}
			}
			return got == n
		})
	}
	waitCount("ready", world)
	cmds[0].Process.Signal(syscall.SIGUSR1)
	cmds[1].Process.Signal(syscall.SIGUSR1)
	waitCount("usr1", world)
	// The store sent the first request on and took the second as the same.
	sent := regexp.MustCompile(`muster: SIGUSR1: sent to job j-\S+'s workers \(2 nodes\)`)
	already := regexp.MustCompile(`muster: SIGUSR1: already sent to job j-\S+'s workers`)
	testwait.Until(t, 20*time.Second, "both nodes to hear from the store", func() bool {
		return len(sent.FindAllString(errs[0].String()+errs[1].String(), -1)) == 1 && len(already.FindAllString(errs[0].String()+errs[1].String(), -1)) == 1
	})
	cmds[1].Process.Signal(syscall.SIGUSR2)
	for i := range cmds {
		if r := waitLocked(t, cmds[i], &outs[i], &errs[i]); r.code != 0 {
			t.Fatalf("node %s: exit %d; stderr:\n%s", nw.hosts[i].name, r.code, r.stderr)
		}
	}
	got := signalLines(out.String())
	for rank := range world {
		for _, w := range []string{"ready", "usr1", "usr2"} {
			if l := fmt.Sprintf("%s %d", w, rank); got[l] != 1 {
				t.Errorf("%q %d times, want once; output:\n%s", l, got[l], out.String())
			}
		}
	}
}

// agent run as a container's PID 1 (its init passes signals on to the
// agent it runs) forwards SIGUSR1 and SIGUSR2 to every worker once.
func TestAgentRunAsPID1ForwardsSignals(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a new PID namespace needs root")
	}
	const world = 4
	cmd := exec.Command("/bin/sh", "-c", `mount --make-rprivate / && mount -t proc proc /proc && exec "$0" "$@"`,
		agentBin, "run", "--rdzv", "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), "--nnodes", "1", "--nproc", strconv.Itoa(world),
		"--", "sh", "-c", forwardScript)
	cmd.Env = agentEnv("TMPDIR=" + t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	var out, errb testfixture.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
			t.Skipf("cannot make PID and mount namespaces here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	count := func(what string) int {
		n := 0
		for l, c := range signalLines(out.String()) {
			if strings.HasPrefix(l, what+" ") {
				n += c
			}
		}
		return n
	}
	testwait.Until(t, 30*time.Second, "every worker ready", func() bool { return count("ready") == world })
	cmd.Process.Signal(syscall.SIGUSR1)
	testwait.Until(t, 20*time.Second, "SIGUSR1 at every worker", func() bool { return count("usr1") == world })
	cmd.Process.Signal(syscall.SIGUSR2)
	if r := waitLocked(t, cmd, &out, &errb); r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	got := signalLines(out.String())
	for rank := range world {
		for _, w := range []string{"ready", "usr1", "usr2"} {
			if l := fmt.Sprintf("%s %d", w, rank); got[l] != 1 {
				t.Errorf("%q %d times, want once; output:\n%s", l, got[l], out.String())
			}
		}
	}
}

// A signal sent while the job's workers are not yet running (its nodes
// check their health) does not reach the workers that start later, which
// have no handler for it yet: the job runs as if it had not come.
func TestSignalBeforeTheWorkersStartIsNotHeld(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd, out, errb := launcher(t, nil, "run", "--nproc", "2", "--health-check", `touch `+dir+`/checking; sleep 2`, "--",
		"sh", "-c", `sleep 0.5; echo "rank $RANK ran"`)
	testwait.Until(t, 20*time.Second, "the health check", func() bool { _, err := os.Stat(filepath.Join(dir, "checking")); return err == nil })
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmd, out, errb); r.code != 0 || strings.Count(r.stdout, " ran\n") != 2 {
		t.Fatalf("exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
