package e2e

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"golang.org/x/sys/unix"
)

// The store an agent hosts stops serving its TCP address (its listening
// socket shut down under it, so accept fails for good): the agent exits
// non-zero naming the failure, rather than run on with a store no node
// or launcher can reach.
func TestAgentExitsWhenItsStoreFails(t *testing.T) {
	t.Parallel()
	ap := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), nil)
	exited := make(chan error, 1)
	go func() { exited <- ap.cmd.Wait() }()
	shutdownListenerOf(t, ap.cmd.Process.Pid, ap.addr)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("agent exited with %v, want code 1; log:\n%s", err, ap.log())
		}
		if want := "agent: store stopped serving " + ap.addr; !strings.Contains(ap.log(), want) {
			t.Fatalf("agent's last words lack %q; log:\n%s", want, ap.log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent runs on after its store failed")
	}
}

// shutdownListenerOf shuts down process pid's listening TCP socket on addr,
// through a copy of its descriptor (pidfd_getfd, as a debugger would).
func shutdownListenerOf(t *testing.T, pid int, addr string) {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fds {
		target, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fd, err := unix.PidfdGetfd(pidfd, target, 0)
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) {
			t.Skipf("pidfd_getfd: %v", err)
		}
		if err != nil {
			continue
		}
		sa, err := unix.Getsockname(fd)
		in, ok := sa.(*unix.SockaddrInet4)
		listening, lerr := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		if err == nil && ok && strconv.Itoa(in.Port) == port && lerr == nil && listening == 1 {
			err := unix.Shutdown(fd, syscall.SHUT_RD)
			unix.Close(fd)
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		unix.Close(fd)
	}
	t.Fatalf("no listening socket on %s in process %d", addr, pid)
}
