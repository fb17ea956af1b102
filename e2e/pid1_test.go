package e2e

import (
	"bytes"
	"errors"
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

// The agent as a container's entrypoint: PID 1 of its own PID namespace,
// with a /proc of that namespace. It runs jobs, and SIGTERM from outside
// stops it gracefully with its exit code.
func TestAgentAsPID1(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a new PID namespace needs root")
	}
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(testfixture.FreePort(t))
	// sh mounts the namespace's /proc, privately, then becomes the agent.
	cmd := exec.Command("/bin/sh", "-c", `mount --make-rprivate / && mount -t proc proc /proc && exec "$0" "$@"`,
		agentBin, "--listen", addr, "--socket", filepath.Join(dir, "agent.sock"))
	cmd.Env = agentEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
			t.Skipf("cannot make PID and mount namespaces here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	testwait.Until(t, 20*time.Second, "the agent to take jobs", func() bool {
		return runLauncher(t, "run", "--cluster", addr, "--", "true").code == 0
	})
	if r := runLauncher(t, "run", "--cluster", addr, "--", "sh", "-c", "sleep 0.2 & exit 3"); r.code != 3 {
		t.Fatalf("job exit code %d, want 3; stderr:\n%s", r.code, r.stderr)
	}
	// PID 1 has one child, the agent, and no zombie.
	if children := childrenOf(cmd.Process.Pid); len(children) != 1 || strings.HasSuffix(children[0], " Z") {
		t.Fatalf("children of PID 1: %q, want only the agent", children)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the agent did not stop on SIGTERM; log:\n%s", errb.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(errb.String(), "agent stopping") {
		t.Fatalf("exit code %d, want 0 after a graceful stop; log:\n%s", code, errb.String())
	}
}

// childrenOf lists the children of pid as "PID (COMMAND) STATE".
func childrenOf(pid int) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		i := bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) >= 2 && string(f[1]) == strconv.Itoa(pid) {
			out = append(out, string(b[:i+1])+" "+string(f[0]))
		}
	}
	return out
}
