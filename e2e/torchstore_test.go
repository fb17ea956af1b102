package e2e

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// torchLine is one torchclient's report.
type torchLine struct {
	rank, restart, useAgentStore, port, bind, joined, stale, id string
}

func torchLines(t *testing.T, stdout string) []torchLine {
	t.Helper()
	var lines []torchLine
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(l)
		// [R] restart K rank R of N use-agent-store X port P bind joined J stale S id I
		if len(f) != 18 || f[1] != "restart" {
			t.Fatalf("unexpected line %q in:\n%s", l, stdout)
		}
		lines = append(lines, torchLine{restart: f[2], rank: f[4], useAgentStore: f[8], port: f[10], bind: f[11],
			joined: f[13], stale: f[15], id: f[17]})
	}
	return lines
}

// TestAgentServesTorchStore runs torch's TCPStore client pattern under
// launcher run: by default every rank is a client of the store that node
// rank 0's agent holds on MASTER_PORT (no rank can bind it); with
// --no-agent-store rank 0 binds and hosts it, as before.
func TestAgentServesTorchStore(t *testing.T) {
	t.Parallel()
	worker := testProgram(t, "torchclient")
	for _, tt := range []struct {
		name    string
		args    []string
		ranks   int
		agent   string // TORCHELASTIC_USE_AGENT_STORE
		bindMin string // what rank 0 saw of MASTER_PORT
	}{
		{"64 ranks", []string{"--nproc", "64"}, 64, "True", "held"},
		{"256 ranks", []string{"--nproc", "256"}, 256, "True", "held"},
		{"no agent store", []string{"--nproc", "8", "--no-agent-store"}, 8, "False", "free"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"run"}, tt.args...), "--", worker)
			r := runLauncher(t, args...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			lines := torchLines(t, r.stdout)
			if len(lines) != tt.ranks {
				t.Fatalf("%d lines, want %d", len(lines), tt.ranks)
			}
			ids, joined := map[string]bool{}, map[string]bool{}
			for _, l := range lines {
				ids[l.id] = true
				joined[l.joined] = true
				if l.useAgentStore != tt.agent || l.stale != "false" {
					t.Errorf("rank %s: TORCHELASTIC_USE_AGENT_STORE=%s stale=%s", l.rank, l.useAgentStore, l.stale)
				}
				if l.rank == "0" && l.bind != tt.bindMin {
					t.Errorf("rank 0 found MASTER_PORT %s, want %s", l.bind, tt.bindMin)
				}
			}
			// One unique ID for all; each rank counted in once.
			if len(ids) != 1 || len(joined) != tt.ranks {
				t.Errorf("%d unique IDs, %d distinct join counts for %d ranks", len(ids), len(joined), tt.ranks)
			}
		})
	}
}

// TestTorchStoreAcrossRestarts: a restarted job keeps its MASTER_PORT, and
// its new round starts on an empty store.
func TestTorchStoreAcrossRestarts(t *testing.T) {
	t.Parallel()
	worker := testProgram(t, "torchclient")
	cmd, out, errb := launcher(t, []string{"FAIL_RANK=1"}, "run", "--nproc", "4", "--max-restarts", "1", "--", worker)
	r := wait(t, cmd, out, errb)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	ports := map[string]bool{}
	rounds := map[string]int{}
	for _, l := range torchLines(t, r.stdout) {
		rounds[l.restart]++
		ports[l.port] = true
		if l.stale != "false" {
			t.Errorf("rank %s of round %s saw the last round's keys", l.rank, l.restart)
		}
	}
	if rounds["0"] != 4 || rounds["1"] != 4 || len(ports) != 1 {
		t.Fatalf("rounds %v, MASTER_PORTs %v:\n%s", rounds, ports, r.stdout)
	}
}

// TestAgentReleasesTorchStore: an agent that stays up serves a job's
// TCPStore for the job only; once the job ends, MASTER_PORT is free.
func TestAgentReleasesTorchStore(t *testing.T) {
	t.Parallel()
	worker := testProgram(t, "torchclient")
	addr := startAgent(t)
	r := runLauncher(t, "run", "--cluster", addr, "--nproc", "4", "--", worker)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	lines := torchLines(t, r.stdout)
	if len(lines) != 4 || lines[0].bind != "held" {
		t.Fatalf("lines %v", lines)
	}
	port := lines[0].port
	// The release reaches the agent just after the job's end.
	testwait.Until(t, 10*time.Second, "MASTER_PORT "+port+" to be free after the job ended", func() bool {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
		if err == nil {
			l.Close()
		}
		return err == nil
	})
}
