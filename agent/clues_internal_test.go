package agent

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// stoppedGroups finds a stopped process by its process group, and only a
// stopped one; processGroup reads a process's group.
func TestStoppedGroups(t *testing.T) {
	cmd := exec.Command("sleep", "100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	if got := processGroup(pid); got != pid {
		t.Fatalf("processGroup(%d) = %d, want its own group", pid, got)
	}
	if got := processGroup(os.Getpid()); got != syscall.Getpgrp() {
		t.Errorf("processGroup(self) = %d, want %d", got, syscall.Getpgrp())
	}
	if stoppedGroups()[pid] {
		t.Fatal("a running process's group counted as stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The kernel stops it asynchronously: wait for its state, bounded.
	testwait.Until(t, 5*time.Second, "a stopped process's group to be found stopped", func() bool { return stoppedGroups()[pid] })
}

// localAddrs takes NCCL's node addresses: loopback and this host's own
// addresses are local, others and garbage are not.
func TestLocalAddrs(t *testing.T) {
	local := localAddrs()
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.2": true, "[::1]:28028": true, "::1": true,
		"192.0.2.77": false, "": false, "node-a": false, "10.0.0.1:x": false,
	} {
		if got := local(addr); got != want {
			t.Errorf("local(%q) = %v, want %v", addr, got, want)
		}
	}
}
