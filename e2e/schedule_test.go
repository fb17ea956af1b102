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

// nodeSchedules is each node's schedule, as launcher nodes -o json lists it.
func nodeSchedules(t *testing.T, store string) map[string]string {
	t.Helper()
	r := runLauncher(t, "nodes", "--cluster", store, "-o", "json")
	var l struct {
		Items []struct{ Name, Schedule string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &l); r.code != 0 || err != nil {
		t.Fatalf("nodes -o json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	out := map[string]string{}
	for _, n := range l.Items {
		out[n.Name] = n.Schedule
	}
	return out
}

// Three agents, a (hosting the store), b and c: once b is cordoned a new
// job's round forms on a and c, one that needs all three waits saying why,
// and it forms on b the moment b is uncordoned.
func TestNodeCordon(t *testing.T) {
	t.Parallel()
	host := startAgentAt(t, "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), []string{"--name", "a", "--addr", "127.0.0.1"})
	joinAgent(t, host.addr, "b", "127.0.0.2")
	joinAgent(t, host.addr, "c", "127.0.0.3")
	testwait.Until(t, 20*time.Second, "b and c to join", func() bool {
		s := nodeSchedules(t, host.addr)
		return s["b"] == "schedulable" && s["c"] == "schedulable"
	})
	if r := runLauncher(t, "nodes", "cordon", "--cluster", host.addr, "b"); r.code != 0 || r.stdout != "node b cordoned\n" {
		t.Fatalf("cordon: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if s := nodeSchedules(t, host.addr); s["b"] != "cordoned" || s["a"] != "schedulable" {
		t.Fatalf("schedules %v; want b cordoned", s)
	}
	show := []string{"--", "sh", "-c", `echo "$MUSTER_NODE_RANK $MUSTER_NODE_ADDRS"`}
	r := runLauncher(t, append([]string{"run", "--cluster", host.addr, "-n", "2", "--wait-timeout", "0"}, show...)...)
	if lines := strings.Join(sortedLines(r.stdout), "|"); r.code != 0 || lines != "[0] 0 127.0.0.1 127.0.0.3|[1] 1 127.0.0.1 127.0.0.3" {
		t.Fatalf("with b cordoned: exit %d, stdout %q\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = runLauncher(t, "run", "--cluster", host.addr, "-n", "3", "--wait-timeout", "0", "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "not usable: node b is cordoned") {
		t.Fatalf("three nodes without a wait: exit %d, stderr:\n%s", r.code, r.stderr)
	}

	cmd := exec.Command(launcherBin, append([]string{"run", "--cluster", host.addr, "-n", "3", "--wait-timeout", "60s"}, show...)...)
	var out, errb testfixture.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	testwait.Until(t, 20*time.Second, "the wait to name the cordon", func() bool {
		return strings.Contains(errb.String(), "muster: waiting for nodes: 2 of 3 ready (a, c); 1 missing; not usable: node b is cordoned")
	})
	// --cluster given to nodes, before its command, is heard as well.
	if r := runLauncher(t, "nodes", "--cluster", host.addr, "uncordon", "b"); r.code != 0 || r.stdout != "node b uncordoned\n" {
		t.Fatalf("uncordon: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
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
	want := "[0] 0 127.0.0.1 127.0.0.2 127.0.0.3|[1] 1 127.0.0.1 127.0.0.2 127.0.0.3|[2] 2 127.0.0.1 127.0.0.2 127.0.0.3"
	if lines := strings.Join(sortedLines(out.String()), "|"); lines != want {
		t.Fatalf("after the uncordon: %q, want %q", lines, want)
	}
}
