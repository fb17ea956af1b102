package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// runNode is one node of an agent run job on a namespace host.
type runNode struct {
	cmd  *exec.Cmd
	out  testfixture.Buffer
	done chan struct{}
	code int
}

// startRunNode runs `agent run args...` on h, as its container's
// entrypoint would, with a /run of its own: the store a node hosts serves
// no other node's socket.
func startRunNode(t *testing.T, nw *network, h *host, args ...string) *runNode {
	t.Helper()
	dir, err := os.MkdirTemp(nw.dir, "run-"+h.name+"-")
	if err != nil {
		t.Fatal(err)
	}
	full := append([]string{"netns", "exec", h.ns, "sh", "-c", `mount -t tmpfs tmpfs /run && exec "$0" "$@"`, agentBin, "run"}, args...)
	n := &runNode{cmd: exec.Command("ip", full...), done: make(chan struct{})}
	n.cmd.Env = agentEnv("TMPDIR="+dir, "MUSTER_TOKEN="+runToken, "MUSTER_NAME="+h.name)
	n.cmd.Stdout, n.cmd.Stderr = &n.out, &n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.cmd.Wait()
		n.code = n.cmd.ProcessState.ExitCode()
		close(n.done)
	}()
	t.Cleanup(func() {
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(20 * time.Second):
			n.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("node %s:\n%s", h.name, n.out.String())
		}
	})
	return n
}

// With --store-replicas 3, node ranks 0..2 host the store's replicas: the
// death of node rank 0's container (its agent run killed) restarts the job
// on the other three nodes, which run it to its end and exit 0.
func TestNetnsAgentRunReplicasOutliveTheRendezvousHost(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 4)
	var peers []string
	for _, h := range nw.hosts[:3] {
		peers = append(peers, h.ip)
	}
	dir := t.TempDir()
	// Each worker says it is up, in its round, then runs until told to stop.
	script := `touch ` + dir + `/up-$TORCHELASTIC_RESTART_COUNT-$RANK; while [ ! -e ` + dir + `/go ]; do sleep 0.1; done; echo "rank $RANK of $WORLD_SIZE done"`
	nodes := make([]*runNode, len(nw.hosts))
	for i, h := range nw.hosts {
		nodes[i] = startRunNode(t, nw, h, "--node-rank", strconv.Itoa(i), "--nnodes", "3:4", "--max-restarts", "2",
			"--store-replicas", "3", "--store-peers", strings.Join(peers, ","), "--last-call", "1s", "--restart-backoff", "0",
			"--join-timeout", "30s", "--kill-timeout", "2s", "--node-timeout", "2s", "--", "sh", "-c", script)
	}
	up := func(round int) int {
		m, _ := filepath.Glob(filepath.Join(dir, "up-"+strconv.Itoa(round)+"-*"))
		return len(m)
	}
	testwait.Until(t, 30*time.Second, "a round of four nodes", func() bool { return up(0) == 4 })
	start := time.Now()
	if err := nodes[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-nodes[0].done
	testwait.Until(t, 30*time.Second, "a round of the three nodes left", func() bool { return up(1) == 3 })
	t.Logf("the job restarted on three nodes %s after node rank 0's death", time.Since(start).Round(100*time.Millisecond))
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes[1:] {
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("node rank %d still runs 30 s after its job was told to end:\n%s", i+1, n.out.String())
		}
		if n.code != 0 {
			t.Errorf("node rank %d exited %d, want 0:\n%s", i+1, n.code, n.out.String())
		}
	}
	if out := nodes[1].out.String(); !strings.Contains(out, "succeeded, exit code 0") {
		t.Errorf("node rank 1 does not say how the job ended:\n%s", out)
	}
}
