package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// runToken is the cluster token of the agent run tests' containers.
const runToken = "e2e-agent-run-token-0123456789abcdef"

// startNodes starts one container per name, each running the same
// `agent run` line: args, then -- and the job's command.
func startNodes(t testing.TB, net string, names []string, args ...string) map[string]string {
	t.Helper()
	containers := map[string]string{}
	for _, name := range names {
		line := append([]string{"agent", "run"}, args...)
		containers[name] = runContainer(t, net, name, []string{"MUSTER_TOKEN=" + runToken}, line...)
	}
	return containers
}

func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	return names
}

// matchingLines counts the lines of logs that match re.
func matchingLines(logs string, re *regexp.Regexp) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

// The same line in every container forms one round; node rank 0 prints
// every rank's output, whole; every container exits 0.
func TestAgentRunContainersFormOneRound(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		nodes, nproc, lines int
	}{
		{3, 2, 1},
		{8, 8, 50}, // 64 ranks, 3,200 lines
	} {
		t.Run(fmt.Sprintf("%d nodes of %d", tt.nodes, tt.nproc), func(t *testing.T) {
			t.Parallel()
			net := newDockerNet(t)
			names := nodeNames(tt.nodes)
			job := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i of rank $RANK of $WORLD_SIZE on node $MUSTER_NODE_RANK"; i=$((i+1)); done`, tt.lines)
			nodes := startNodes(t, net, names, "--rdzv", "node-0:29400", "--nnodes", fmt.Sprint(tt.nodes),
				"--nproc", fmt.Sprint(tt.nproc), "--", "sh", "-c", job)
			for _, name := range names {
				if code := waitExit(t, nodes[name], 2*time.Minute); code != 0 {
					t.Fatalf("%s exited %d:\n%s", name, code, containerLogs(t, nodes[name]))
				}
			}
			logs := containerLogs(t, nodes["node-0"])
			world := tt.nodes * tt.nproc
			if got := matchingLines(logs, regexp.MustCompile(`^\[\d+\] line \d+ of rank \d+ of \d+ on node \d+$`)); got != world*tt.lines {
				t.Errorf("node-0 printed %d rank lines, want %d:\n%s", got, world*tt.lines, logs)
			}
			for rank := 0; rank < world; rank++ {
				for i := 0; i < tt.lines; i++ {
					line := fmt.Sprintf("[%d] line %d of rank %d of %d on node %d\n", rank, i, rank, world, rank/tt.nproc)
					if strings.Count(logs, line) != 1 {
						t.Fatalf("node-0's output has %q %d times", line, strings.Count(logs, line))
					}
				}
			}
			for _, name := range names[1:] {
				if logs := containerLogs(t, nodes[name]); !strings.Contains(logs, "succeeded, exit code 0") {
					t.Errorf("%s does not say how the job ended:\n%s", name, logs)
				}
			}
		})
	}
}

// docker stop of one container stops the job gracefully everywhere: every
// rank gets SIGTERM, and every container exits with the job's code.
func TestAgentRunDockerStopStopsEveryNode(t *testing.T) {
	t.Parallel()
	net := newDockerNet(t)
	names := nodeNames(3)
	nodes := startNodes(t, net, names, "--rdzv", "node-0:29400", "--nnodes", "3", "--kill-timeout", "5s", "--",
		"sh", "-c", `trap 'echo "rank $RANK got TERM"; exit 3' TERM; echo "rank $RANK up"; while :; do sleep 0.1; done`)
	testwait.Until(t, 20*time.Second, "every rank up", func() bool {
		return matchingLines(containerLogs(t, nodes["node-0"]), regexp.MustCompile(`^\[\d\] rank \d up$`)) == 3
	})
	// Each shell set its trap before it printed its line.
	dockerStop(t, nodes["node-1"], 20)
	for _, name := range names {
		if code := waitExit(t, nodes[name], time.Minute); code != 3 {
			t.Errorf("%s exited %d, want 3 (the job's code):\n%s", name, code, containerLogs(t, nodes[name]))
		}
	}
	logs := containerLogs(t, nodes["node-0"])
	for rank := 0; rank < 3; rank++ {
		if rank == 1 {
			continue // its output went with its node
		}
		if !strings.Contains(logs, fmt.Sprintf("rank %d got TERM", rank)) {
			t.Errorf("rank %d was not stopped gracefully:\n%s", rank, logs)
		}
	}
	if !strings.Contains(logs, "node node-1") {
		t.Errorf("the summary does not name the stopped node:\n%s", logs)
	}
}

// An elastic job whose node is killed goes on in a new round on the nodes
// left, with the restart count given to its workers.
func TestAgentRunElasticRestartAfterNodeLoss(t *testing.T) {
	t.Parallel()
	net := newDockerNet(t)
	names := nodeNames(3)
	job := `echo "rank $RANK of $WORLD_SIZE restart $TORCHELASTIC_RESTART_COUNT run $TORCHELASTIC_RUN_ID"; ` +
		`if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 60; fi`
	nodes := startNodes(t, net, names, "--rdzv", "node-0:29400", "--nnodes", "2:3", "--last-call", "3s",
		"--max-restarts", "1", "--", "sh", "-c", job)
	first := regexp.MustCompile(`^\[\d\] rank \d of 3 restart 0 run (\S+)$`)
	testwait.Until(t, time.Minute, "a round of three nodes", func() bool {
		return matchingLines(containerLogs(t, nodes["node-0"]), first) == 3
	})
	dockerKill(t, nodes["node-2"], "KILL")
	for _, name := range names[:2] {
		if code := waitExit(t, nodes[name], time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", name, code, containerLogs(t, nodes[name]))
		}
	}
	logs := containerLogs(t, nodes["node-0"])
	runID := first.FindStringSubmatch(firstLine(logs, first))[1]
	for rank := 0; rank < 2; rank++ {
		line := fmt.Sprintf("[%d] rank %d of 2 restart 1 run %s\n", rank, rank, runID)
		if !strings.Contains(logs, line) {
			t.Errorf("no %q in node-0's output:\n%s", line, logs)
		}
	}
	if !strings.Contains(logs, "node node-2 lost") || !strings.Contains(logs, "restart 1 of 1 (--max-restarts)") {
		t.Errorf("the restart is not explained:\n%s", logs)
	}
}

func firstLine(logs string, re *regexp.Regexp) string {
	for _, l := range strings.Split(logs, "\n") {
		if re.MatchString(l) {
			return l
		}
	}
	return ""
}

// A job that waits for a node that never comes fails after the join
// timeout, naming what it has and what is missing, on every node. The
// timeout leaves room for the second container to start on a busy engine.
func TestAgentRunTimeoutNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	net := newDockerNet(t)
	names := nodeNames(2)
	nodes := startNodes(t, net, names, "--rdzv", "node-0:29400", "--nnodes", "3", "--join-timeout", "10s", "--", "true")
	for _, name := range names {
		if code := waitExit(t, nodes[name], time.Minute); code != 1 {
			t.Errorf("%s exited %d, want 1", name, code)
		}
		if logs := containerLogs(t, nodes[name]); !strings.Contains(logs, "waited 10s for nodes: 2 of 3 ready (node-0, node-1); 1 missing") {
			t.Errorf("%s does not say what is missing:\n%s", name, logs)
		}
	}
}

// No zombie stays in a container: not a worker's orphan (its job's shim
// reaps it) nor a process orphaned onto PID 1 (the agent's init reaps it).
func TestAgentRunLeavesNoZombie(t *testing.T) {
	t.Parallel()
	net := newDockerNet(t)
	// The worker waits on a FIFO, so that no process of its own comes and
	// goes while the orphans' end is awaited.
	nodes := startNodes(t, net, []string{"node-0"}, "--rdzv", "node-0", "--nnodes", "1", "--",
		"sh", "-c", `mkfifo /tmp/release; (sleep 0.5 &); (sh -c 'sleep 0.5 &' &); echo orphans made; read x < /tmp/release; exit 4`)
	c := nodes["node-0"]
	testwait.Until(t, 20*time.Second, "the worker", func() bool { return strings.Contains(containerLogs(t, c), "orphans made") })
	// A process orphaned onto PID 1, as docker exec's children can be.
	docker(t, "exec", c, "sh", "-c", "sleep 0.5 & exit 0")
	// Every orphan is a sleep: once none is left, exited or not, each was
	// reaped; a zombie stays until the wait gives up.
	reaped := func() (bool, string) {
		out, err := exec.Command("docker", "exec", c, "ps", "-o", "pid,ppid,stat,comm").CombinedOutput()
		if err != nil {
			t.Fatalf("ps: %v\n%s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n")[1:] {
			if f := strings.Fields(l); len(f) >= 4 && (strings.HasPrefix(f[2], "Z") || strings.Contains(f[3], "sleep")) {
				return false, string(out)
			}
		}
		return true, string(out)
	}
	var ps string
	testwait.UntilShowing(t, 20*time.Second, "the orphan to be reaped", func() bool {
		var ok bool
		ok, ps = reaped()
		return ok
	}, func() string { return ps })
	docker(t, "exec", c, "sh", "-c", "echo > /tmp/release")
	if code := waitExit(t, c, time.Minute); code != 4 {
		t.Errorf("exit code %d, want the job's 4:\n%s", code, containerLogs(t, c))
	}
}

// A killed rendezvous host ends every other node as soon as the death of
// any other node would, saying so: their connections to its store closed,
// and its store will not come back to say how the job ended.
func TestAgentRunHostKilled(t *testing.T) {
	t.Parallel()
	const hostKilledBound = 2500 * time.Millisecond
	net := newDockerNet(t)
	names := nodeNames(3)
	nodes := startNodes(t, net, names, "--rdzv", "node-0:29400", "--nnodes", "3", "--",
		"sh", "-c", `echo "rank $RANK up"; sleep 60`)
	testwait.Until(t, 20*time.Second, "every rank up", func() bool {
		return matchingLines(containerLogs(t, nodes["node-0"]), regexp.MustCompile(`^\[\d\] rank \d up$`)) == 3
	})
	dockerKill(t, nodes["node-0"], "KILL")
	waitExit(t, nodes["node-0"], 30*time.Second)
	killed := finishedAt(t, nodes["node-0"])
	for _, name := range names[1:] {
		if code := waitExit(t, nodes[name], 30*time.Second); code != 1 {
			t.Errorf("%s exited %d, want 1", name, code)
		}
		// Gossip takes seconds to declare the host dead; a closed
		// connection says it at once. The engine's exit times leave out
		// how long the docker commands took on a busy machine.
		took := finishedAt(t, nodes[name]).Sub(killed)
		t.Logf("%s exited %s after the host's SIGKILL", name, took.Round(10*time.Millisecond))
		if took > hostKilledBound {
			t.Errorf("%s exited %s after the host's SIGKILL, more than %s:\n%s", name, took.Round(10*time.Millisecond), hostKilledBound, containerLogs(t, nodes[name]))
		}
		if logs := containerLogs(t, nodes[name]); !strings.Contains(logs, "the rendezvous host node-0:29400 (node node-0) died") {
			t.Errorf("%s does not name the lost host:\n%s", name, logs)
		}
	}
}

// finishedAt is when the container's main process exited, as the engine
// recorded it.
func finishedAt(t testing.TB, container string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, docker(t, "inspect", "--format", "{{.State.FinishedAt}}", container))
	if err != nil {
		t.Fatalf("docker inspect %s: FinishedAt: %v", container, err)
	}
	return at
}
