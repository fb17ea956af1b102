package e2e

import (
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// testfixture.Buffer is output a process writes while the test reads it.
// joinAgent starts an agent that joins the store at store as node name on
// addr; it stops when the test ends. Each "node" has a temporary directory
// of its own, as a machine of its own would.
func joinAgent(t *testing.T, store, name, addr string) {
	t.Helper()
	cmd := exec.Command(agentBin, "--store", store, "--name", name, "--addr", addr)
	cmd.Env = agentEnv("TMPDIR=" + t.TempDir())
	var log testfixture.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cmd, "agent "+name, log.String)
}

func TestClusterRunWaitsForNodes(t *testing.T) {
	t.Parallel()
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "n1"})
	cluster := t
	t.Run("nodes come", func(t *testing.T) {
		cmd := exec.Command(launcherBin, "run", "--cluster", host.addr, "-n", "3", "--wait-timeout", "60s", "--",
			"sh", "-c", `echo "$RANK $GROUP_RANK $WORLD_SIZE"`)
		var out, errb testfixture.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		// Before rounds could wait, the launcher failed here at once.
		testwait.Until(t, 20*time.Second, "progress with one node", func() bool {
			return strings.Contains(errb.String(), "muster: waiting for nodes: 1 of 3 ready (n1); 2 missing (for up to 1m0s, --wait-timeout)\n")
		})
		joinAgent(cluster, host.addr, "n2", "127.0.0.2")
		testwait.Until(t, 20*time.Second, "progress with two nodes", func() bool {
			return strings.Contains(errb.String(), "muster: waiting for nodes: 2 of 3 ready (n1, n2); 1 missing\n")
		})
		joinAgent(cluster, host.addr, "n3", "127.0.0.3")
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("launcher: %v; stderr:\n%s", err, errb.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("launcher hung; stderr:\n%s", errb.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		sort.Strings(lines)
		if want := "[0] 0 0 3|[1] 1 1 3|[2] 2 2 3"; strings.Join(lines, "|") != want {
			t.Fatalf("output %q, want %q", out.String(), want)
		}
	})
	t.Run("nodes do not come", func(t *testing.T) {
		r := runLauncher(t, "run", "--cluster", host.addr, "-n", "5", "--wait-timeout", "1s", "--", "true")
		want := "muster: waiting for nodes: 3 of 5 ready (n1, n2, n3); 2 missing (for up to 1s, --wait-timeout)\n" +
			"muster: job j-"
		if r.code != 1 || !strings.HasPrefix(r.stderr, want) ||
			!strings.HasSuffix(r.stderr, " failed: waited 1s for nodes: 3 of 5 ready (n1, n2, n3); 2 missing; exit code 1\n") {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("no wait", func(t *testing.T) {
		r := runLauncher(t, "run", "--cluster", host.addr, "-n", "5", "--wait-timeout", "0", "--", "true")
		if r.code != 1 || !strings.Contains(r.stderr, "--nnodes 5: only 3 node(s) registered") {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
}

// --max-restarts starts a failed job again, as torchrun does, up to its
// count for the whole job; the failure after the last restart fails the job
// with that worker's code. MASTER_PORT is the agent's TCPStore, the same in
// every round; with --no-agent-store each round has a port of its own.
func TestLauncherMaxRestarts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		restarts string
		code     int
		noStore  bool
	}{
		{"succeeds on the last restart", "2", 0, false},
		{"fails past the last restart", "1", 5, false},
		{"no agent store", "2", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"run", "--nproc", "2", "--max-restarts", tt.restarts}
			if tt.noStore {
				args = append(args, "--no-agent-store")
			}
			r := runLauncher(t, append(args, "--", "sh", "-c",
				`echo "rank $RANK restart $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS port $MASTER_PORT"; [ "$TORCHELASTIC_RESTART_COUNT" = 2 ] || { [ $RANK = 1 ] && exit 5; sleep 30; }`)...)
			if r.code != tt.code {
				t.Fatalf("exit code %d, want %d\n%s\n%s", r.code, tt.code, r.stdout, r.stderr)
			}
			portOf := map[string]string{} // by restart count
			for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				// [R] rank R restart K of M port P
				f := strings.Fields(l)
				if len(f) != 9 || f[1] != "rank" || f[3] != "restart" {
					t.Fatalf("unexpected line %q", l)
				}
				if p, ok := portOf[f[4]]; ok && p != f[8] {
					t.Fatalf("round %s has two MASTER_PORTs: %s and %s", f[4], p, f[8])
				}
				portOf[f[4]] = f[8]
			}
			want := tt.restarts
			if tt.code != 0 {
				want = "1"
			}
			if !strings.Contains(r.stderr, "restart "+want+" of "+tt.restarts+" (--max-restarts)") {
				t.Errorf("no restart line in:\n%s", r.stderr)
			}
			distinct := map[string]bool{}
			for _, p := range portOf {
				distinct[p] = true
			}
			if wantPorts := map[bool]int{false: 1, true: len(portOf)}[tt.noStore]; len(portOf) < 2 || len(distinct) != wantPorts {
				t.Errorf("rounds' MASTER_PORTs %v, want %d distinct", portOf, wantPorts)
			}
			if tt.code == 0 && !strings.Contains(r.stdout, "[1] rank 1 restart 2 of 2 port") {
				t.Errorf("the last round did not run rank 1:\n%s", r.stdout)
			}
		})
	}
}
