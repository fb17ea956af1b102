package e2e

import (
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// Four agents on two switches, their names in another order than their
// switches: node ranks follow the switches, so that consecutive ranks
// share one; -H keeps its first host as node rank 0. The path is given
// with --topology or agent.env's MUSTER_TOPOLOGY, and launcher nodes shows
// it.
func TestFabricNodeRanks(t *testing.T) {
	t.Parallel()
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "a", "--addr", "127.0.0.1", "--topology", "block=b1,switch=s2"})
	joinFabricAgent(t, host.addr, "b", "127.0.0.2", nil, "--topology", "block=b1,switch=s1")
	joinFabricAgent(t, host.addr, "c", "127.0.0.3", []string{"MUSTER_TOPOLOGY=block=b1,switch=s2"})
	joinFabricAgent(t, host.addr, "d", "127.0.0.4", nil, "--topology", "block=b1,switch=s1")
	testwait.Until(t, 30*time.Second, "b, c and d to join", func() bool {
		out := runLauncher(t, "nodes", "--cluster", host.addr).stdout
		return strings.Contains(out, "127.0.0.2") && strings.Contains(out, "127.0.0.3") && strings.Contains(out, "127.0.0.4")
	})
	show := []string{"--", "sh", "-c", `echo "$MUSTER_NODE_RANK $MUSTER_NODE_ADDRS"`}
	tests := []struct {
		name string
		args []string
		want string // node rank 0's line: the nodes' addresses by node rank
	}{
		{"by switch, then by name", []string{"-n", "4"}, "0 127.0.0.2 127.0.0.4 127.0.0.1 127.0.0.3"},
		{"-H: its first host, that host's switch, then the others", []string{"-H", "c,b,d,a"}, "0 127.0.0.3 127.0.0.1 127.0.0.2 127.0.0.4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runLauncher(t, append(append([]string{"run", "--cluster", host.addr}, tt.args...), show...)...)
			if r.code != 0 || !strings.Contains(r.stdout, "[0] "+tt.want+"\n") {
				t.Fatalf("exit %d, stdout:\n%s\nwant the line [0] %s\nstderr:\n%s", r.code, r.stdout, tt.want, r.stderr)
			}
		})
	}
	t.Run("launcher nodes", func(t *testing.T) {
		r := runLauncher(t, "nodes", "--cluster", host.addr, "-o", "json")
		var list struct {
			Items []struct{ Name, Fabric string }
		}
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatalf("%v:\n%s", err, r.stdout)
		}
		got := map[string]string{}
		for _, n := range list.Items {
			got[n.Name] = n.Fabric
		}
		if got["a"] != "block=b1,switch=s2" || got["c"] != "block=b1,switch=s2" || got["b"] != "block=b1,switch=s1" {
			t.Errorf("fabric paths %v", got)
		}
	})
	t.Run("a bad path", func(t *testing.T) {
		cmd := exec.Command(agentBin, "--store", host.addr, "--name", "e", "--topology", "switch=s1,switch=s2")
		cmd.Env = agentEnv()
		out, err := cmd.CombinedOutput()
		if code := exitCode(err); code != 2 || !strings.Contains(string(out), `--topology (MUSTER_TOPOLOGY) "switch=s1,switch=s2": level "switch" given twice`) {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
}

// joinFabricAgent starts an agent that joins store as name at addr, with
// env added to its environment and args to its flags.
func joinFabricAgent(t *testing.T, store, name, addr string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(agentBin, append([]string{"--store", store, "--name", name, "--addr", addr}, args...)...)
	cmd.Env = agentEnv(append([]string{"TMPDIR=" + t.TempDir()}, env...)...)
	var log testfixture.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cmd, "agent "+name, log.String)
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
