package security

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/musterhq/muster/testfixture"
	"golang.org/x/sys/unix"
)

func TestLauncherTrustsOnlySocketsOfRootOrItself(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to serve a socket as another user")
	}
	dir := testfixture.SharedDir(t)
	os.Chmod(dir, 0o777)
	mine := filepath.Join(dir, "mine.sock")
	l, err := net.Listen("unix", mine)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	theirs := filepath.Join(dir, "theirs.sock")
	lc := make(chan net.Listener, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			lc <- nil
			return
		}
		l, _ := net.Listen("unix", theirs)
		lc <- l
	}()
	tl := <-lc
	if tl == nil {
		t.Fatal("cannot listen as nobody")
	}
	defer tl.Close()
	if !trustedSocket(mine) {
		t.Error("a socket of this user's is not trusted")
	}
	if trustedSocket(theirs) {
		t.Error("a socket served by nobody is trusted: another user could pose as the agent")
	}
}
