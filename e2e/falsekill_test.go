package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// nodeTimeout is the agents' node timeout in these tests: the default.
const nodeTimeout = 5 * time.Second

// lossFor is how long TestNetnsNoFalseKill drops 30 % of a node's packets:
// long enough for several hundred probes of it (and about a hundred by it)
// to go through the loss, short enough for every run of the suite.
const lossFor = 30 * time.Second

// What is ordinary on GPU nodes kills no job: an agent paused for 3 s (GC,
// VM steal, swap), a node's packets all dropped for 2 s (a link flap, a
// bond failover), 30 % of a node's packets dropped both ways. The head,
// which hosts the store, is paused and cut off too: its blackout hits a job
// that does not run there, its stop one that does. After the fault, each
// job runs on for longer than the node timeout, and then ends well. A
// silence past the node timeout is a loss: the job stops, naming the node.
func TestNetnsNoFalseKill(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		target string // the host the fault is on: a is the head, b runs a worker
		hosts  string // the job's hosts
		fault  func(nw *network, h *host, a *agent, done <-chan struct{})
		lost   bool // the job must stop, naming target
	}{
		{"stop head 3s", "a", "a,b", stopFor(3 * time.Second), false},
		{"stop worker node 3s", "b", "b,c", stopFor(3 * time.Second), false},
		{"blackout head 2s", "a", "b,c", blackoutFor(2 * time.Second), false},
		{"blackout worker node 2s", "b", "b,c", blackoutFor(2 * time.Second), false},
		{"loss 30 percent worker node", "b", "b,c", lossOf("0.3", lossFor), false},
		{"blackout worker node past the timeout", "b", "b,c", blackoutUntil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nw := newNetwork(t, 3)
			agents := nw.startCluster()
			dir := t.TempDir()
			marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-netns-%s", time.Now().UnixNano(), strings.ReplaceAll(tc.name, " ", "-"))
			// Two workers, each waiting for the go file.
			cmd, out, errb := nw.launcher("run", "-H", tc.hosts, "--nproc", "1", "-x", marker, "-x", "DIR="+dir, "--", "sh", "-c",
				`touch "$DIR/started-$RANK"; while [ ! -e "$DIR/go" ]; do sleep 0.05; done; echo "done $RANK"`)
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			testwait.Until(t, 20*time.Second, "2 workers", func() bool {
				m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
				return len(m) == 2
			})

			tc.fault(nw, nw.host(tc.target), agents[tc.target], exited)
			if tc.lost {
				select {
				case <-exited:
				case <-time.After(hangAfter):
					t.Fatalf("the job went on %s after b was cut off past the node timeout; stderr:\n%s", hangAfter, errb.String())
				}
				if code := cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(errb.String(), "node b lost") {
					t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
				}
				testwait.Until(t, 10*time.Second, "no worker left", func() bool { return len(jobProcesses(t, marker)) == 0 })
				return
			}
			// The stimulus: the job runs on past the time a death declared
			// during the fault would take to stop it.
			select {
			case <-exited:
				t.Fatalf("the job ended after %s: exit %d, stderr:\n%s", tc.name, cmd.ProcessState.ExitCode(), errb.String())
			case <-time.After(nodeTimeout + 2*time.Second):
			}
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			select {
			case <-exited:
			case <-time.After(hangAfter):
				t.Fatalf("the job did not end %s after its workers were let go; stderr:\n%s", hangAfter, errb.String())
			}
			got := strings.Split(strings.TrimSpace(out.String()), "\n")
			slices.Sort(got)
			if want := []string{"[0] done 0", "[1] done 1"}; cmd.ProcessState.ExitCode() != 0 || !slices.Equal(got, want) {
				t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", cmd.ProcessState.ExitCode(), out.String(), errb.String())
			}
		})
	}
}

// stopFor pauses an agent with SIGSTOP for d, as a long GC pause or a
// swapped-out process would.
func stopFor(d time.Duration) func(*network, *host, *agent, <-chan struct{}) {
	return func(nw *network, _ *host, a *agent, _ <-chan struct{}) {
		t := nw.t
		t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d)
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}

// blackoutFor drops every packet of a host for d.
func blackoutFor(d time.Duration) func(*network, *host, *agent, <-chan struct{}) {
	return func(nw *network, h *host, _ *agent, _ <-chan struct{}) {
		nw.dropAll(h)
		time.Sleep(d)
		nw.acceptAll(h)
	}
}

// blackoutUntil drops every packet of a host until the job ends.
func blackoutUntil(nw *network, h *host, _ *agent, done <-chan struct{}) {
	nw.dropAll(h)
	select {
	case <-done:
	case <-time.After(hangAfter):
	}
	nw.acceptAll(h)
}

// lossOf drops each packet to and from a host with probability p, for d.
func lossOf(p string, d time.Duration) func(*network, *host, *agent, <-chan struct{}) {
	return func(nw *network, h *host, _ *agent, _ <-chan struct{}) {
		stat := []string{"-m", "statistic", "--mode", "random", "--probability", p}
		in := append([]string{"INPUT", "-i", "eth0"}, stat...)
		out := append([]string{"OUTPUT", "-o", "eth0"}, stat...)
		nw.dropRules(h, "-I", in, out)
		time.Sleep(d)
		nw.dropRules(h, "-D", in, out)
	}
}
