package supervise

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// SignalLeaders reaches each worker's own process once and nothing it
// started: a child in the worker's process group that does not handle the
// signal lives on.
func TestSignalLeadersSparesChildren(t *testing.T) {
	const workers = 3
	script := `trap 'echo got-usr1' USR1; sleep 1000 & child=$!; echo ready; ` +
		`while kill -0 $child 2>/dev/null; do wait; done; echo child-gone`
	var scripts []string
	for range workers {
		scripts = append(scripts, script)
	}
	j := startShell(t, time.Second, scripts...)
	for i := range workers {
		j.waitLine(t, i, "ready")
	}
	if err := j.g.SignalLeaders(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for i := range workers {
		j.waitLine(t, i, "got-usr1")
	}
	// Every worker's sleep still runs: the signal went to no group. Waited
	// for, as a child caught in its exec shows no environment for a moment.
	testwait.UntilShowing(t, 10*time.Second, fmt.Sprintf("%d processes of the job alive after SIGUSR1 (each worker and its child)", 2*workers),
		func() bool { return len(marked(j.marker)) == 2*workers }, func() string { return fmt.Sprint(len(marked(j.marker)), " alive") })
}

// Abort sends SIGABRT to the worker's whole group with core dumps off.
func TestAbortWithoutCore(t *testing.T) {
	j := startShell(t, time.Second, `sleep 1000 & echo ready; wait`, `echo ready; sleep 1000`)
	j.waitLine(t, 0, "ready")
	j.waitLine(t, 1, "ready")
	if err := j.g.Abort(0); err != nil {
		t.Fatal(err)
	}
	exits := map[int]Event{}
	timeout := time.After(10 * time.Second)
	for len(exits) < 1 {
		select {
		case ev := <-j.g.Events():
			if ev.Kind == Exited {
				exits[ev.Index] = ev
			}
		case <-timeout:
			t.Fatal("worker 0 did not end on SIGABRT")
		}
	}
	if ev, ok := exits[0]; !ok || ev.Signal != int(syscall.SIGABRT) {
		t.Fatalf("exits %+v, want worker 0 killed by SIGABRT", exits)
	}
	if _, ok := exits[1]; ok {
		t.Fatal("worker 1 ended too")
	}
}

// noCore sets the soft limit to 1, under the hard limit.
func TestNoCore(t *testing.T) {
	j := startShell(t, time.Second, `echo ready; exec sleep 1000`)
	j.waitLine(t, 0, "ready")
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_CORE, &lim); lim.Max < 1 {
		t.Skip("core dumps are off here (hard limit 0): nothing to turn off")
	}
	// Its environment reads empty while the shell execs sleep.
	var pids []int
	testwait.Until(t, 5*time.Second, "the worker's one process", func() bool {
		pids = marked(j.marker)
		return len(pids) == 1
	})
	noCore(pids[0])
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max core file size") {
			if f := strings.Fields(l); len(f) < 6 || f[4] != "1" {
				t.Errorf("core limit after noCore: %q, want a soft limit of 1", l)
			}
			return
		}
	}
	t.Error("no core limit in /proc/PID/limits")
}
