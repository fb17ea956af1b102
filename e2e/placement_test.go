package e2e

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// Three nodes, a (hosting the store), b and c: -H, --hostfile and --exclude
// choose which run a job, and -H's order is the node rank order.
func TestPlacementByHostList(t *testing.T) {
	t.Parallel()
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "a", "--addr", "127.0.0.1"})
	joinAgent(t, host.addr, "b", "127.0.0.2")
	joinAgent(t, host.addr, "c", "127.0.0.3")
	testwait.Until(t, 20*time.Second, "b and c to join", func() bool {
		out := runLauncher(t, "nodes", "--cluster", host.addr).stdout
		return strings.Contains(out, "127.0.0.2") && strings.Contains(out, "127.0.0.3")
	})
	dir := t.TempDir()
	hostfile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostfile, []byte("# Open MPI\nb slots=2\nc slots=2 # the last\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("b slots=2\nc slots=two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	show := []string{"--", "sh", "-c", `echo "$RANK $MUSTER_NODE_RANK $MASTER_ADDR $MUSTER_NODE_ADDRS"`}
	tests := []struct {
		name string
		args []string
		want []string // sorted output lines
	}{
		{"-H gives the order", []string{"-H", "c,a"}, []string{
			"[0] 0 0 127.0.0.3 127.0.0.3 127.0.0.1",
			"[1] 1 1 127.0.0.3 127.0.0.3 127.0.0.1"}},
		{"--hostfile with slots", []string{"--hostfile", hostfile}, []string{
			"[0] 0 0 127.0.0.2 127.0.0.2 127.0.0.3",
			"[1] 1 0 127.0.0.2 127.0.0.2 127.0.0.3",
			"[2] 2 1 127.0.0.2 127.0.0.2 127.0.0.3",
			"[3] 3 1 127.0.0.2 127.0.0.2 127.0.0.3"}},
		{"--exclude", []string{"-n", "2", "--exclude", "b"}, []string{
			"[0] 0 0 127.0.0.1 127.0.0.1 127.0.0.3",
			"[1] 1 1 127.0.0.1 127.0.0.1 127.0.0.3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runLauncher(t, append(append([]string{"run", "--cluster", host.addr}, tt.args...), show...)...)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			sort.Strings(lines)
			if r.code != 0 || strings.Join(lines, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("exit %d, stdout:\n%s\nwant:\n%s\nstderr:\n%s", r.code, r.stdout, strings.Join(tt.want, "\n"), r.stderr)
			}
		})
	}
	usage := []struct {
		name string
		args []string
		want string
	}{
		{"bad hostfile line", []string{"--hostfile", bad}, bad + `:2: slots must be a positive integer, got "two"`},
		{"-H and --hostfile", []string{"-H", "a", "--hostfile", hostfile}, "-H and --hostfile: give one"},
		{"slots differ", []string{"-H", "a:2,b:4"}, "muster runs the same number of workers on every node, but -H gives a:2 and b:4"},
		{"more nodes than hosts", []string{"-n", "3", "--hostfile", hostfile}, "--nnodes 3 is more than the 2 hosts --hostfile " + hostfile + " lists"},
	}
	for _, tt := range usage {
		t.Run(tt.name, func(t *testing.T) {
			r := runLauncher(t, append(append([]string{"run", "--cluster", host.addr}, tt.args...), show...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant %q", r.code, r.stderr, tt.want)
			}
		})
	}
	t.Run("a listed host is missing", func(t *testing.T) {
		r := runLauncher(t, "run", "--cluster", host.addr, "-H", "a,d", "--wait-timeout", "0", "--", "true")
		if r.code != 1 || !strings.Contains(r.stderr, "--nnodes 2 on the listed hosts: 1 of 2 ready (a); 1 missing; not usable: listed host d is not registered") {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
}
