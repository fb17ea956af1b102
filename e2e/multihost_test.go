package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// Three hosts, each in a network namespace of its own: every worker gets
// the rank, node rank and addresses of the node it really runs on.
func TestNetns3NodeJob(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	nw.startCluster()

	// Every worker prints what it was given and the namespace it runs in.
	r := nw.run("run", "-n", "3", "--nproc", "2", "--", "sh", "-c",
		`echo "$RANK $LOCAL_RANK $MUSTER_NODE_RANK $WORLD_SIZE $MASTER_ADDR $MUSTER_NODE_ADDRS $(readlink /proc/self/ns/net)"`)
	// Nodes are ranked by name: a, b, c.
	addrs := nw.hosts[0].ip + " " + nw.hosts[1].ip + " " + nw.hosts[2].ip
	var want []string
	for rank := range 6 {
		node := nw.hosts[rank/2]
		want = append(want, fmt.Sprintf("[%d] %d %d %d 6 %s %s %s", rank, rank, rank%2, rank/2, nw.hosts[0].ip, addrs, node.netns))
	}
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	slices.Sort(got)
	if r.code != 0 || !slices.Equal(got, want) {
		t.Fatalf("exit %d, stdout:\n%s\nwant (in any order):\n%s\nstderr:\n%s", r.code, r.stdout, strings.Join(want, "\n"), r.stderr)
	}

	// Many lines from every rank: each arrives whole, tagged, and in order.
	const lines = 2000
	pad := strings.Repeat("x", 100)
	r = nw.run("run", "-n", "3", "--nproc", "2", "-x", "PAD="+pad, "--", "sh", "-c",
		`seq -f "$RANK %g $PAD" 1 `+strconv.Itoa(lines))
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	next := make([]int, 6)
	for i, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var rank int
		if _, err := fmt.Sscanf(l, "[%d]", &rank); err != nil || rank < 0 || rank >= 6 || l != fmt.Sprintf("[%d] %d %d %s", rank, rank, next[rank]+1, pad) {
			t.Fatalf("line %d: %q", i+1, l)
		}
		next[rank]++
	}
	for rank, n := range next {
		if n != lines {
			t.Errorf("rank %d: %d lines, want %d", rank, n, lines)
		}
	}
}

// A node whose agent is SIGKILLed is lost at once, and the job with it: no
// worker of it stays on any node.
func TestNetnsAgentKilled(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	agents := nw.startCluster()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-netns-kill", time.Now().UnixNano())
	cmd, out, errb := nw.launcher("run", "-n", "3", "--nproc", "1", "-x", marker, "--", "sleep", "1000")
	testwait.Until(t, 20*time.Second, "3 workers", func() bool { return len(jobProcesses(t, marker)) == 3 })

	kill9(t, agents["b"])
	r := wait(t, cmd, out, errb)
	// Its closed connection says so at once; on a loaded machine its
	// kernel may free the gossip port too late to tell, and its silence,
	// confirmed by a peer, says so within the node timeout.
	if r.code == 0 || !(strings.Contains(r.stderr, "node b lost: agent connection closed") ||
		strings.Contains(r.stderr, "node b lost: nothing from its agent")) {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	testwait.Until(t, 10*time.Second, "no worker left", func() bool { return len(jobProcesses(t, marker)) == 0 })
}

// A node whose link goes down is declared dead by gossip and the job fails;
// the workers stop on every node. Once the link is back, the node's agent
// registers again by itself and takes jobs.
func TestNetnsLinkCut(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	nw.startCluster()
	c := nw.host("c")
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-netns-cut", time.Now().UnixNano())
	cmd, out, errb := nw.launcher("run", "-n", "3", "--nproc", "1", "-x", marker, "--", "sleep", "1000")
	testwait.Until(t, 20*time.Second, "3 workers", func() bool { return len(jobProcesses(t, marker)) == 3 })

	nw.cut(c)
	r := wait(t, cmd, out, errb)
	if r.code == 0 || !strings.Contains(r.stderr, "node c lost: no gossip ack") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	// c's agent stops its own worker too: to it, a and b died.
	testwait.Until(t, 10*time.Second, "no worker left", func() bool { return len(jobProcesses(t, marker)) == 0 })

	nw.heal(c)
	nw.waitReady(3, 30*time.Second)
	testwait.Until(t, 20*time.Second, "c listed alive", func() bool { alive, _ := nw.listsNode("c"); return alive })
	nw.runsOn(nw.hosts...)
}

// A node cut off by a firewall, with no job running, leaves the registered
// nodes; once its packets pass again it comes back and takes jobs.
func TestNetnsPartitionHeals(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	nw.startCluster()
	c := nw.host("c")

	nw.dropAll(c)
	// A probe job running as c is cut off fails with c lost; the next
	// ones find two nodes.
	var last result
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last 3-node job: exit %d, stderr:\n%s", last.code, last.stderr)
		}
	})
	testwait.Until(t, 20*time.Second, "c to leave the registered nodes", func() bool {
		last = nw.ready(3)
		return last.code != 0 && strings.Contains(last.stderr, "only 2 node(s) registered")
	})
	nw.runsOn(nw.host("a"), nw.host("b"))

	nw.acceptAll(c)
	nw.waitReady(3, 30*time.Second)
	testwait.Until(t, 20*time.Second, "c listed alive", func() bool { alive, _ := nw.listsNode("c"); return alive })
	nw.runsOn(nw.hosts...)
}

// An agent with another token cannot gossip with the cluster: it never
// registers and says it waits. The right token on the same host joins.
func TestNetnsWrongToken(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 2)
	nw.startHead()
	b := nw.host("b")

	wrong := nw.join(b, nw.tokenFile("wrong", "fedcba9876543210fedcba9876543210"))
	testwait.Until(t, 20*time.Second, "the agent with the wrong token to say it waits", func() bool {
		return strings.Contains(wrong.logText(), "waiting for the store through gossip")
	})
	// By now (5 s) it would have registered if it could.
	if listed, list := nw.listsNode("b"); listed || strings.Contains(list, b.ip) {
		t.Fatalf("the agent with the wrong token is listed:\n%s", list)
	}
	if r := nw.ready(2); r.code == 0 {
		t.Fatal("a 2-node job ran with the agent with the wrong token")
	}
	kill9(t, wrong)

	nw.join(b, nw.token)
	nw.waitReady(2, 20*time.Second)
	nw.runsOn(nw.hosts...)
}

// A second agent taking a name alive in the cluster fails at start; the
// node of that name goes on.
func TestNetnsDuplicateName(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	nw.startHead()
	nw.join(nw.host("b"), nw.token)
	nw.waitReady(2, 20*time.Second)

	out, err := nw.runAgentIn(nw.host("c"), "--join", nw.hosts[0].ip, "--name", "b", "--token-file", nw.token, "--tls-ca", nw.ca)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(out, "name already taken") {
		t.Fatalf("second agent named b: %v\n%s", err, out)
	}
	nw.runsOn(nw.host("a"), nw.host("b"))
}

// A node that cannot reach the store for a few seconds, while gossip still
// reaches it through another node, keeps its job: its worker's exit,
// held meanwhile, arrives once the link is back, and the job succeeds.
func TestNetnsStoreUnreachable(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	nw.startCluster()
	a, b := nw.host("a"), nw.host("b")
	dir := t.TempDir()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-netns-store", time.Now().UnixNano())
	cmd, out, errb := nw.launcher("run", "-n", "3", "--nproc", "1", "-x", marker, "-x", "DIR="+dir, "--", "sh", "-c",
		`touch "$DIR/started-$RANK"; while [ ! -e "$DIR/go" ]; do sleep 0.05; done; echo "done $RANK"`)
	testwait.Until(t, 20*time.Second, "3 workers", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(m) == 3
	})

	nw.block(b, a.ip, "-I")
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the workers to exit", func() bool { return len(jobProcesses(t, marker)) == 0 })
	// The stimulus: b's exit stays held for this long, longer than gossip
	// takes to declare a node dead that nobody reaches.
	time.Sleep(3 * time.Second)
	// Still running: b is neither lost nor done to the store.
	if jobs := nw.run("jobs"); !strings.Contains(jobs.stdout, " running ") {
		t.Fatalf("with b cut off from the store, jobs:\n%s", jobs.stdout)
	}
	nw.block(b, a.ip, "-D")

	r := wait(t, cmd, out, errb)
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	slices.Sort(got)
	if want := []string{"[0] done 0", "[1] done 1", "[2] done 2"}; r.code != 0 || !slices.Equal(got, want) {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
