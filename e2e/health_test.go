package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// nodesRegistered waits until `launcher nodes` lists every one of names as
// registered with the store.
func (nw *network) nodesRegistered(names ...string) {
	nw.t.Helper()
	testwait.Until(nw.t, 20*time.Second, strings.Join(names, ", ")+" registered", func() bool {
		r := nw.run("nodes")
		for _, name := range names {
			row := nodeRow(r.stdout, name)
			if row == "" || strings.Contains(row, "not-registered") {
				return false
			}
		}
		return true
	})
}

// Node health on three namespace hosts: b's agent runs a --health-check
// that fails. A job of two nodes forms on a and b, b is left out and named
// with its check's output, and the job runs on a and the spare c; without
// a spare the job fails saying why; `launcher nodes` shows each node's last
// result. A job's own --health-check is checked likewise.
func TestUnhealthyNodeIsLeftOut(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	a, b, c := nw.hosts[0], nw.hosts[1], nw.hosts[2]
	nw.startHead()
	nw.startAgent(b, b.name, "--join", a.ip, "--token-file", nw.token, "--tls-ca", nw.ca,
		"--health-check", `echo "scratch disk full on $MUSTER_NODE_NAME"; exit 1`)
	nw.join(c, nw.token)
	nw.nodesRegistered("a", "b", "c")

	// a's worker may run in round 0 before b's check fails: the round's
	// roster tells the rounds apart.
	r := nw.run("run", "-n", "2", "--no-tag-output", "--", "sh", "-c", `echo "$MUSTER_NODE_ADDRS/$(readlink /proc/self/ns/net)"`)
	var got []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if addrs, ns, _ := strings.Cut(l, "/"); addrs == a.ip+" "+c.ip {
			got = append(got, ns)
		}
	}
	if r.code != 0 || !sameSet(got, []string{a.netns, c.netns}) {
		t.Fatalf("exit %d, ran on a and c in %v, want %s, %s; stdout:\n%s\nstderr:\n%s", r.code, got, a.netns, c.netns, r.stdout, r.stderr)
	}
	want := `muster: round 0 stops: node b failed its health check (agent command): "echo \"scratch disk full on $MUSTER_NODE_NAME\"; exit 1" exited with code 1 after `
	if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, ": scratch disk full on b; a new round follows (not counted as a restart)\n") {
		t.Fatalf("stderr does not name b and its check's output:\n%s", r.stderr)
	}

	nodes := nw.run("nodes")
	if row := nodeRow(nodes.stdout, "b"); !strings.Contains(row, " failed (") || !strings.Contains(row, "agent command: ") ||
		!strings.Contains(row, "scratch disk full on b") {
		t.Errorf("launcher nodes does not show b's failed check:\n%s", nodes.stdout)
	}
	if row := nodeRow(nodes.stdout, "a"); !strings.Contains(row, " ok (") {
		t.Errorf("launcher nodes does not show a's check:\n%s", nodes.stdout)
	}

	// No spare: all three are needed.
	r = nw.run("run", "-n", "3", "--wait-timeout", "0", "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "failed: --nnodes 3: 2 of 3 ready (a, c); 1 missing; not usable: node b failed its health check (agent command): ") {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}

	// The job's own check, on the listed hosts a and c, fails on c.
	r = nw.run("run", "-H", "a,c", "--wait-timeout", "0", "--health-check", `[ "$MUSTER_NODE_NAME" != c ] || { echo "no GPU memory"; exit 2; }`, "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "node c failed its health check (job command): ") ||
		!strings.Contains(r.stderr, "exited with code 2 after ") || !strings.Contains(r.stderr, ": no GPU memory") {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
}

// launcher run -n MIN:MAX on three namespace hosts: with two nodes the job
// starts after --last-call; a third node grows it (not counted as a
// restart); a lost node costs one restart, and the job goes on with the
// nodes left.
func TestLauncherElasticNodes(t *testing.T) {
	t.Parallel()
	nw := newNetwork(t, 3)
	a, b, c := nw.hosts[0], nw.hosts[1], nw.hosts[2]
	nw.startHead()
	agentB := nw.join(b, nw.token)
	nw.waitReady(2, 20*time.Second)

	full := []string{"netns", "exec", a.ns, launcherBin, "run", "--cluster", nw.store(), "--token-file", nw.token, "--tls-ca", nw.ca,
		"-n", "2:3", "--last-call", "1s", "--max-restarts", "1", "--wait-timeout", "60s", "--no-tag-output", "--",
		"sh", "-c", `echo "$RANK $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $(readlink /proc/self/ns/net)"; [ "$TORCHELASTIC_RESTART_COUNT" = 1 ] || exec sleep 1000`}
	cmd := exec.Command("ip", full...)
	var out, errb testfixture.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := func(world, restart string) []string {
		var nss []string
		for _, l := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(l); len(f) == 4 && f[1] == world && f[2] == restart {
				nss = append(nss, f[3])
			}
		}
		return nss
	}
	testwait.Until(t, 30*time.Second, "two nodes after the last call", func() bool {
		return sameSet(lines("2", "0"), []string{a.netns, b.netns})
	})
	nw.join(c, nw.token)
	testwait.Until(t, 30*time.Second, "the job grown to three nodes", func() bool {
		return sameSet(lines("3", "0"), []string{a.netns, b.netns, c.netns})
	})
	kill9(t, agentB)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("launcher: %v; stdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("launcher did not end; stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	if got := lines("2", "1"); !sameSet(got, []string{a.netns, c.netns}) {
		t.Fatalf("the round after b's loss ran in %v, want a and c; stdout:\n%s\nstderr:\n%s", got, out.String(), errb.String())
	}
	for _, want := range []string{
		"muster: round 0 stops: node c joined: the job grows from 2 nodes (at most 3); a new round follows (not counted as a restart)\n",
		"muster: round 1 stops: node b lost: ",
		"; restart 1 of 1 (--max-restarts)",
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, errb.String())
		}
	}
}
