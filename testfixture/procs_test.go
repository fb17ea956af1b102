package testfixture

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// A child, and a grandchild orphaned to init, are both found, and found no
// more once ended.
func TestLeftProcesses(t *testing.T) {
	t.Setenv(ownerEnv, strconv.Itoa(os.Getpid()))
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer child.Process.Kill()
	out, err := exec.Command("sh", "-c", "sleep 61 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	defer syscall.Kill(orphan, syscall.SIGKILL)
	pids := func() []int {
		var pids []int
		for _, p := range LeftProcesses() {
			pids = append(pids, p.Pid)
		}
		return pids
	}
	if got := pids(); !slices.Contains(got, child.Process.Pid) || !slices.Contains(got, orphan) {
		t.Fatalf("left processes %v, want the child %d and the orphan %d", got, child.Process.Pid, orphan)
	}
	child.Process.Kill()
	syscall.Kill(orphan, syscall.SIGKILL)
	testwait.Until(t, 10*time.Second, "the ended processes to go from the list", func() bool {
		got := pids()
		return !slices.Contains(got, child.Process.Pid) && !slices.Contains(got, orphan)
	})
}
