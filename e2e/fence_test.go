package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// A partition {a, b} | {c, d} with a job on c and d, the store on a. No
// rank runs twice: c's and d's agents stop their workers once they have not
// reached the store for the fence bound, and the store starts the job's next
// round on the spares a and b only after that bound has passed. Each worker
// holds a lock on its rank's file on the filesystem all hosts share, so a
// rank started while its old self still runs finds the lock taken; the test
// also watches the processes themselves, from outside every namespace. With
// no restart left, the job fails and the launcher says when the far side's
// workers are certain to be gone, which they are by then.
func TestNetnsPartitionRunsNoRankTwice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		restarts int
	}{
		{"restart on the spares", 1},
		{"no restart", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nw := newNetwork(t, 4)
			nw.startCluster()
			a, b, c, d := nw.host("a"), nw.host("b"), nw.host("c"), nw.host("d")
			dir := t.TempDir()
			log := filepath.Join(dir, "log")
			marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-fence-%d", time.Now().UnixNano(), tc.restarts)
			// c and d are listed first: the first round runs there, the
			// next one on a and b, the only nodes left.
			cmd, out, errb := nw.launcher("run", "-H", "c,d,a,b", "-n", "2", "--nproc", "1",
				"--max-restarts", fmt.Sprint(tc.restarts), "-x", marker, "-x", "DIR="+dir, "--", "sh", "-c",
				`exec 9>"$DIR/rank-$RANK.lock"
				if ! flock -n 9; then echo "twice $RANK $TORCHELASTIC_RESTART_COUNT $(date +%s.%N)" >>"$DIR/log"; exit 7; fi
				echo "start $RANK $TORCHELASTIC_RESTART_COUNT $(date +%s.%N) $(readlink /proc/self/ns/net)" >>"$DIR/log"
				if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec sleep 1000; fi`)
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			testwait.Until(t, 20*time.Second, "2 workers on c and d", func() bool {
				b, _ := os.ReadFile(log)
				return strings.Count(string(b), "start ") == 2
			})

			// From outside every namespace: when the old round's
			// processes on c and d were last seen, and then seen gone.
			w := watchGone(marker, c, d)
			defer w.stop()
			t0 := time.Now()
			for _, far := range []*host{c, d} {
				for _, near := range []*host{a, b} {
					nw.block(far, near.ip, "-I")
				}
			}
			// Healed before the agents stop: an agent cut off from its
			// store is not what this test stops.
			t.Cleanup(func() {
				for _, far := range []*host{c, d} {
					for _, near := range []*host{a, b} {
						nw.block(far, near.ip, "-D")
					}
				}
			})
			select {
			case <-exited:
			case <-time.After(90 * time.Second):
				t.Fatalf("the job went on 90 s into the partition; stderr:\n%s", errb.String())
			}
			// Without a restart the launcher exits long before the fence:
			// c's and d's workers run on until their agents stop them.
			testwait.Until(t, 30*time.Second, "c's and d's workers gone", func() bool {
				_, goneBy := w.result()
				return !goneBy.IsZero()
			})
			w.stop()
			code := cmd.ProcessState.ExitCode()
			logText, _ := os.ReadFile(log)
			seen, goneBy := w.result()
			newStart := roundStart(t, logText, 1)
			t.Logf("partition at 0 s; c's and d's workers last seen at %.2f s, gone by %.2f s; the next round's first worker at %.2f s; exit %d\nstderr:\n%s\nworkers' log:\n%s",
				seen.Sub(t0).Seconds(), goneBy.Sub(t0).Seconds(), sinceOrNever(newStart, t0), code, errb.String(), logText)

			if strings.Contains(string(logText), "twice ") {
				t.Errorf("a rank started while the same rank still ran:\n%s", logText)
			}
			switch tc.restarts {
			case 1:
				if code != 0 || !strings.Contains(errb.String(), "restart 1 of 1") {
					t.Fatalf("exit %d with a spare pair free; stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
				}
				for _, h := range []*host{a, b} {
					if !regexp.MustCompile(`start \d 1 \S+ ` + regexp.QuoteMeta(h.netns)).Match(logText) {
						t.Errorf("the second round did not run on %s:\n%s", h.name, logText)
					}
				}
				if !newStart.After(goneBy) {
					t.Errorf("the next round started at %.2f s, before c's and d's workers were seen gone at %.2f s",
						sinceOrNever(newStart, t0), goneBy.Sub(t0).Seconds())
				}
			case 0:
				if code == 0 {
					t.Fatalf("exit 0 with c and d cut off and no restart; stderr:\n%s", errb.String())
				}
				if !newStart.IsZero() {
					t.Errorf("a second round ran without restarts:\n%s", logText)
				}
				// The bound is stated to the second, rounded down.
				m := regexp.MustCompile(`node [cd] lost: .*; its workers are certain to be gone by (\d\d:\d\d:\d\d) UTC`).FindStringSubmatch(errb.String())
				if m == nil {
					t.Fatalf("the launcher does not say when c's and d's workers are certain to be gone; stderr:\n%s", errb.String())
				}
				at, err := time.Parse("15:04:05", m[1])
				if err != nil {
					t.Fatal(err)
				}
				y, mo, day := t0.UTC().Date()
				bound := time.Date(y, mo, day, at.Hour(), at.Minute(), at.Second(), 0, time.UTC).Add(time.Second)
				if bound.Before(t0) {
					bound = bound.Add(24 * time.Hour) // past midnight UTC
				}
				if seen.After(bound) {
					t.Errorf("c's and d's workers ran until %s, after the bound the launcher stated, %s UTC",
						seen.UTC().Format("15:04:05.000"), m[1])
				}
			}
		})
	}
}

func sinceOrNever(at, t0 time.Time) float64 {
	if at.IsZero() {
		return -1
	}
	return at.Sub(t0).Seconds()
}

// roundStart is the earliest time a worker of round wrote in the log.
func roundStart(t *testing.T, logText []byte, round int) time.Time {
	t.Helper()
	var first time.Time
	for _, m := range regexp.MustCompile(`(?m)^start \d+ (\d+) (\d+)\.(\d{9}) `).FindAllSubmatch(logText, -1) {
		if string(m[1]) != strconv.Itoa(round) {
			continue
		}
		sec, _ := strconv.ParseInt(string(m[2]), 10, 64)
		nsec, _ := strconv.ParseInt(string(m[3]), 10, 64)
		if at := time.Unix(sec, nsec); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}

// goneWatch follows a job's processes on some hosts from outside every
// namespace, scanning /proc every 20 ms.
type goneWatch struct {
	mu     sync.Mutex
	seen   time.Time // the end of the last scan that found one running
	goneBy time.Time // the end of the first scan after that found none
	done   chan struct{}
	once   sync.Once
	exited chan struct{}
}

// watchGone watches the processes whose environment holds marker in the
// network namespaces of hosts.
func watchGone(marker string, hosts ...*host) *goneWatch {
	in := map[string]bool{}
	for _, h := range hosts {
		in[h.netns] = true
	}
	w := &goneWatch{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(w.exited)
		for {
			found := false
			for _, pid := range markedPIDs(marker) {
				if ns, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net")); err == nil && in[ns] {
					found = true
				}
			}
			end := time.Now()
			w.mu.Lock()
			if found {
				w.seen, w.goneBy = end, time.Time{}
			} else if !w.seen.IsZero() && w.goneBy.IsZero() {
				w.goneBy = end
			}
			w.mu.Unlock()
			select {
			case <-w.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *goneWatch) stop() {
	w.once.Do(func() { close(w.done) })
	<-w.exited
}

// result is when the processes were last seen, and when they were seen
// gone after that (zero while they run).
func (w *goneWatch) result() (seen, goneBy time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen, w.goneBy
}

// markedPIDs is jobProcesses for a goroutine: the live processes whose
// environment holds marker.
func markedPIDs(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), marker) {
			continue
		}
		if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); !isZombie(stat) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// The head, which hosts the store, cut off from every other node for longer
// than the node timeout and shorter than the fence bound: the store loses
// most of its nodes at once, suspects itself, and fails no job for it. A
// job on c and d, which still reach each other, runs on and succeeds.
func TestNetnsStoreCutOffFailsNoJob(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 4)
	nw.startCluster()
	dir := t.TempDir()
	cmd, out, errb := nw.launcher("run", "-H", "c,d", "--nproc", "1", "-x", "DIR="+dir, "--", "sh", "-c",
		`touch "$DIR/started-$RANK"; while [ ! -e "$DIR/go" ]; do sleep 0.05; done; echo "done $RANK"`)
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	testwait.Until(t, 20*time.Second, "2 workers", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(m) == 2
	})
	// Past the node timeout, with margin, and well within the fence bound.
	blackoutFor(nodeTimeout+4*time.Second)(nw, nw.host("a"), nil, nil)
	select {
	case <-exited:
		t.Fatalf("the job ended after the head was cut off: exit %d, stderr:\n%s", cmd.ProcessState.ExitCode(), errb.String())
	case <-time.After(nodeTimeout):
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(hangAfter):
		t.Fatalf("the job did not end %s after its workers were let go; stderr:\n%s", hangAfter, errb.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || strings.Count(out.String(), "done ") != 2 {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}

// The head cut off past the fence bound: the job's nodes stop its workers,
// and its summary says that they lost the store, which was cut off, not
// that a healthy node was lost.
func TestNetnsStoreCutOffPastTheFenceBlamesTheStore(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 4)
	nw.startCluster()
	dir := t.TempDir()
	cmd, out, errb := nw.launcher("run", "-H", "c,d", "--nproc", "1", "-x", "DIR="+dir, "--", "sh", "-c",
		`touch "$DIR/started-$RANK"; exec sleep 300`)
	testwait.Until(t, 20*time.Second, "2 workers", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(m) == 2
	})
	nw.dropAll(nw.host("a"))
	res := wait(t, cmd, out, errb)
	nw.acceptAll(nw.host("a"))
	if res.code == 0 || !strings.Contains(res.stderr, "lost the store, which had lost contact with many of its nodes at once") {
		t.Fatalf("exit %d; want the summary to say the nodes lost the store; stderr:\n%s", res.code, res.stderr)
	}
}
