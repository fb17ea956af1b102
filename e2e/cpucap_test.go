package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// busyFor is how long TestAgentRunHalfCPUContainers keeps its workers busy:
// 15 s by default, long enough for about 30 node timeouts' worth of probes
// to go through the throttling; MUSTER_E2E_BUSY_SECONDS=45 runs the full
// 45 s of the goal.
func busyFor(t *testing.T) int {
	t.Helper()
	s := os.Getenv("MUSTER_E2E_BUSY_SECONDS")
	if s == "" {
		return 15
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("MUSTER_E2E_BUSY_SECONDS=%q: want a number of seconds above 0", s)
	}
	return n
}

// Three containers capped at half a CPU each (docker run --cpus 0.5), each
// running two workers that spin for the whole job: the agents get what
// CPU the cgroup's quota leaves them, in slices, and are throttled for
// tens of milliseconds at a time. Nobody is declared dead; every container
// exits 0 and every rank finishes. The agents log with -v, so that the
// suspicions along the way are counted. It runs alone, before the parallel
// tests: with other processes busy, the containers get less than their
// quota, and their own spinning would slow the tests around them.
func TestAgentRunHalfCPUContainers(t *testing.T) {
	busy := busyFor(t)
	net := newDockerNet(t)
	names := nodeNames(3)
	// Spins, looking at the clock every thousand turns.
	job := fmt.Sprintf(`end=$(($(date +%%s) + %d)); echo "rank $RANK busy"; `+
		`while [ "$(date +%%s)" -lt "$end" ]; do n=0; while [ $n -lt 1000 ]; do n=$((n+1)); done; done; echo "rank $RANK done"`, busy)
	nodes := map[string]string{}
	for _, name := range names {
		nodes[name] = runContainerWith(t, net, name, []string{"MUSTER_TOKEN=" + runToken}, []string{"--cpus", "0.5"},
			"agent", "run", "-v", "--rdzv", "node-0:29400", "--nnodes", "3", "--nproc", "2", "--", "sh", "-c", job)
	}
	start := time.Now()
	for _, name := range names {
		if code := waitExit(t, nodes[name], time.Duration(busy)*time.Second+2*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", name, code, containerLogs(t, nodes[name]))
		}
	}
	logs := containerLogs(t, nodes["node-0"])
	if got := matchingLines(logs, regexp.MustCompile(`^\[\d\] rank \d done$`)); got != 6 {
		t.Fatalf("%d of 6 ranks done:\n%s", got, logs)
	}
	suspected := 0
	for _, name := range names {
		l := containerLogs(t, nodes[name])
		if strings.Contains(l, " lost") {
			t.Errorf("%s speaks of a loss:\n%s", name, l)
		}
		// The store's suspicions, and memberlist's own (-v logs them).
		suspected += strings.Count(l, `"msg":"node suspected"`) + strings.Count(l, `"msg":"Suspect`)
	}
	t.Logf("3 containers at --cpus 0.5, 6 workers busy for %d s: every container exited 0 after %.1f s; nodes suspected %d times (store and memberlist)",
		busy, time.Since(start).Seconds(), suspected)
}
