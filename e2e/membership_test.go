package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// An agent stopped with SIGTERM (systemctl stop, docker stop, a drain)
// leaves before it stops its workers: the job's next round forms on the
// spare without it, and one restart is all the departure costs.
func TestNetnsGracefulLeaveCostsOneRestart(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	agents := nw.startCluster()
	dir := t.TempDir()
	// Nodes are taken by name: a and b; c is the spare.
	cmd, out, errb := nw.launcher("run", "-n", "2", "--nproc", "1", "--max-restarts", "1", "-x", "DIR="+dir, "--", "sh", "-c",
		`echo "restart $TORCHELASTIC_RESTART_COUNT $(readlink /proc/self/ns/net)"; `+
			`if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then touch "$DIR/started-$RANK"; exec sleep 1000; fi`)
	eventually(t, "2 workers", func() bool {
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
	eventually(t, "b listed as left", func() bool {
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
