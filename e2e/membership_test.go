package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// An agent stopped with SIGTERM (systemctl stop, docker stop, a drain)
// leaves before it stops its workers: the job's next round forms on the
// spare without it, and one restart is all the departure costs. The round
// forms once the workers' exits arrive, not after the kill timeout; when the
// agent's session ends before its exits reach the store (seen under load),
// the kill timeout's fence applies, 20 s here, within the launcher's bound.
func TestNetnsGracefulLeaveCostsOneRestart(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	agents := nw.startCluster()
	dir := t.TempDir()
	// Nodes are taken by name: a and b; c is the spare.
	cmd, out, errb := nw.launcher("run", "-n", "2", "--nproc", "1", "--max-restarts", "1", "--kill-timeout", "20s", "-x", "DIR="+dir, "--", "sh", "-c",
		`echo "restart $TORCHELASTIC_RESTART_COUNT $(readlink /proc/self/ns/net)"; `+
			`if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then touch "$DIR/started-$RANK"; exec sleep 1000; fi`)
	testwait.Until(t, 20*time.Second, "2 workers", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(m) == 2
	})

	b := agents["b"]
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := wait(t, cmd, out, errb)
	if r.code != 0 || !strings.Contains(r.stderr, "node b lost: it left the cluster") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s\nb's log:\n%s", r.code, r.stdout, r.stderr, b.logText())
	}
	for _, h := range []*host{nw.host("a"), nw.host("c")} {
		if line := "restart 1 " + h.netns; !strings.Contains(r.stdout, line) {
			t.Errorf("no %q: the second round did not run on %s; stdout:\n%s", line, h.name, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "restart 2") {
		t.Errorf("more than one restart; stdout:\n%s", r.stdout)
	}
	b.cmd.Wait()
	// The node list says b left, not that it died.
	testwait.Until(t, 20*time.Second, "b listed as left", func() bool {
		_, list := nw.listsNode("b")
		return nodeRow(list, "b") != "" && strings.Contains(nodeRow(list, "b"), " left")
	})
}

// nodeRow is the row of `launcher nodes` output that names node name.
func nodeRow(list, name string) string {
	for _, l := range strings.Split(list, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return l
		}
	}
	return ""
}

// storeCerts makes the network's certificates valid for the stores of
// hosts, all under the one CA.
func (nw *network) storeCerts(hosts ...*host) {
	nw.t.Helper()
	args := []string{"certs", "--dir", nw.dir}
	for _, h := range hosts {
		args = append(args, h.ip)
	}
	if out, err := exec.Command(launcherBin, args...).CombinedOutput(); err != nil {
		nw.t.Fatalf("certs: %v: %s", err, out)
	}
}

// storeArgs are the flags of an agent that hosts a store on h.
func (nw *network) storeArgs(h *host) []string {
	return []string{"--listen", h.ip + ":29400", "--token-file", nw.token,
		"--tls-cert", filepath.Join(nw.dir, "store.pem"), "--tls-key", filepath.Join(nw.dir, "store-key.pem"),
		"--tls-ca", nw.ca, "--socket", filepath.Join(nw.dir, h.name+".sock")}
}

// A second store cannot join a gossip cluster that has one: the agent
// that would host it fails at start, naming the store there is.
func TestNetnsSecondStoreRefused(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 2)
	b := nw.host("b")
	nw.storeCerts(nw.host("a"), b)
	nw.startHead()

	out, err := nw.runAgentIn(b, append([]string{"--name", "b", "--join", nw.hosts[0].ip}, nw.storeArgs(b)...)...)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() <= 0 || !strings.Contains(out, "this gossip cluster has a store already, hosted by node a") {
		t.Fatalf("second store: %v\n%s", err, out)
	}
	nw.runsOn(nw.host("a"))
}

// Two stores that end up in one gossip cluster (started apart, joined by a
// node that gossips with both) each say so loudly, and the node list marks
// the other store's node, which gossip knows, as not registered here.
func TestNetnsOtherStoreMarked(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	a, b, c := nw.host("a"), nw.host("b"), nw.host("c")
	nw.storeCerts(a, c)
	head := nw.startHead()
	other := nw.startAgent(c, "c", nw.storeArgs(c)...)
	testwait.Until(t, 20*time.Second, "c's own store", func() bool { return strings.Contains(other.logText(), "agent registered") })
	nw.startAgent(b, "b", "--join", a.ip+","+c.ip, "--token-file", nw.token, "--tls-ca", nw.ca)

	testwait.Until(t, 20*time.Second, "c marked not registered", func() bool {
		_, list := nw.listsNode("c")
		return strings.Contains(nodeRow(list, "c"), " alive,not-registered ")
	})
	for _, ag := range []*agent{head, other} {
		testwait.Until(t, 20*time.Second, "the stores to warn", func() bool {
			return strings.Contains(ag.logText(), "ANOTHER STORE IN THIS GOSSIP CLUSTER")
		})
	}
}

// Two stores started at once, each joining the other, do not both give
// up: the node whose name sorts first hosts the cluster's store, and the
// other is refused, naming it, as a store started later is.
func TestNetnsStoresStartedTogether(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 2)
	a, b := nw.host("a"), nw.host("b")
	nw.storeCerts(a, b)
	sa := nw.startAgent(a, "a", append(nw.storeArgs(a), "--join", b.ip)...)
	sb := nw.startAgent(b, "b", append(nw.storeArgs(b), "--join", a.ip)...)

	// The node whose name sorts first keeps its store when both start at
	// once; on a loaded machine one may come up well before the other,
	// and then it keeps its store: either way exactly one is left.
	const refused = "this gossip cluster has a store already, hosted by node "
	testwait.Until(t, 20*time.Second, "a store refused", func() bool {
		return strings.Contains(sa.logText(), refused) || strings.Contains(sb.logText(), refused)
	})
	kept, gone, keptHost := sa, sb, a
	if strings.Contains(sa.logText(), refused) {
		kept, gone, keptHost = sb, sa, b
	}
	if !strings.Contains(gone.logText(), refused+keptHost.name) {
		t.Fatalf("the refused store does not name %s:\n%s", keptHost.name, gone.logText())
	}
	var exit *exec.ExitError
	if err := gone.cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("the refused agent: %v, want exit code 1", err)
	}
	testwait.Until(t, 20*time.Second, "the kept store's agent registered", func() bool { return strings.Contains(kept.logText(), "agent registered") })
	if strings.Contains(kept.logText(), "has a store already") {
		t.Fatalf("both stores refused")
	}
	nw.storeHost = keptHost
	nw.runsOn(keptHost)
}
