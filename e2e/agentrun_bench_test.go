package e2e

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// Timings of agent run in containers. Workers print /proc/uptime, which a
// container shares with its host, so the test reads their times on the same
// clock as its own (10 ms resolution). The peer is the same containers
// running the same command without muster: the time a container takes to
// run anything.
//
//	go test -run XXX -bench AgentRun -benchtime 1x -v ./e2e

// uptime is this machine's time since boot, as workers print it.
func uptime(t testing.TB) float64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// uptimes reads the times of the lines of logs that re matches: its first
// group is /proc/uptime's first field.
func uptimes(t testing.TB, logs string, re *regexp.Regexp) []float64 {
	var out []float64
	for _, l := range strings.Split(logs, "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			f, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, f)
		}
	}
	return out
}

// startAll starts a container per name at once and returns them by name.
func startAll(b *testing.B, net string, names []string, env []string, args func(name string) []string) map[string]string {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]string{}
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := runContainer(b, net, name, env, args(name)...)
			mu.Lock()
			out[name] = c
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkAgentRunStart: from the start of N containers at once to the
// first rank running and to every rank running, under agent run and bare.
func BenchmarkAgentRunStart(b *testing.B) {
	needDocker(b)
	const trials = 5
	line := regexp.MustCompile(`^(?:\[\d+\] )?up ([0-9.]+) `)
	for _, n := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) {
			var first, all, bareFirst, bareAll []float64
			for trial := 0; trial < trials; trial++ {
				for _, bare := range []bool{false, true} {
					net := newDockerNet(b)
					names := nodeNames(n)
					t0 := uptime(b)
					nodes := startAll(b, net, names, []string{"MUSTER_TOKEN=" + runToken}, func(string) []string {
						if bare {
							return []string{"sh", "-c", "echo up $(cat /proc/uptime)"}
						}
						return []string{"agent", "run", "--rdzv", "node-0", "--nnodes", strconv.Itoa(n), "--",
							"sh", "-c", "echo up $(cat /proc/uptime)"}
					})
					var times []float64
					for _, name := range names {
						if code := waitExit(b, nodes[name], time.Minute); code != 0 {
							b.Fatalf("%s exited %d:\n%s", name, code, containerLogs(b, nodes[name]))
						}
						if bare || name == "node-0" {
							times = append(times, uptimes(b, containerLogs(b, nodes[name]), line)...)
						}
					}
					if len(times) != n {
						b.Fatalf("%d start times, want %d", len(times), n)
					}
					f, a := slices.Min(times)-t0, slices.Max(times)-t0
					if bare {
						bareFirst, bareAll = append(bareFirst, f), append(bareAll, a)
					} else {
						first, all = append(first, f), append(all, a)
					}
					b.Logf("containers=%d trial %d bare=%v: first rank %.2f s, every rank %.2f s", n, trial, bare, f, a)
				}
			}
			b.ReportMetric(median(first)*1000, "ms-first-rank")
			b.ReportMetric(median(all)*1000, "ms-every-rank")
			b.ReportMetric(median(bareAll)*1000, "ms-bare-every")
			b.ReportMetric(median(all)/median(bareAll), "x-bare")
			b.Logf("containers=%d medians of %d: first rank %.0f ms, every rank %.0f ms; bare containers: first %.0f ms, every %.0f ms",
				n, trials, median(first)*1000, median(all)*1000, median(bareFirst)*1000, median(bareAll)*1000)
		})
	}
}

// BenchmarkAgentRunRestart: from a failure to every rank of the new round
// running, for a worker that fails (two nodes, the same ones go on) and a
// container that is killed (three nodes, two go on).
func BenchmarkAgentRunRestart(b *testing.B) {
	needDocker(b)
	const trials = 5
	// The lines of the round of world ranks after restart restarts.
	round := func(world, restart int) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`^\[\d\] up ([0-9.]+) \S+ world %d restart %d$`, world, restart))
	}
	for _, tt := range []struct {
		name  string
		nodes int
		args  []string
		job   string
	}{
		{"worker-fails", 2, []string{"--nnodes", "2"},
			`echo "up $(cat /proc/uptime) world $WORLD_SIZE restart $TORCHELASTIC_RESTART_COUNT"; ` +
				`if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then if [ $RANK = 1 ]; then sleep 1; echo "fail $(cat /proc/uptime)"; exit 1; fi; sleep 60; fi`},
		{"container-killed", 3, []string{"--nnodes", "2:3", "--last-call", "0s"},
			`echo "up $(cat /proc/uptime) world $WORLD_SIZE restart $TORCHELASTIC_RESTART_COUNT"; if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 60; fi`},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var took []float64
			for trial := 0; trial < trials; trial++ {
				net := newDockerNet(b)
				names := nodeNames(tt.nodes)
				args := append([]string{"agent", "run", "--rdzv", "node-0", "--max-restarts", "1"}, tt.args...)
				nodes := startAll(b, net, names, []string{"MUSTER_TOKEN=" + runToken}, func(string) []string {
					return append(args, "--", "sh", "-c", tt.job)
				})
				host := nodes["node-0"]
				testwait.Until(b, time.Minute, "the first round on every node", func() bool {
					return len(uptimes(b, containerLogs(b, host), round(tt.nodes, 0))) == tt.nodes
				})
				var failed float64
				if tt.name == "container-killed" {
					failed = uptime(b)
					dockerKill(b, nodes[names[len(names)-1]], "KILL")
				}
				testwait.Until(b, time.Minute, "the next round", func() bool {
					return len(uptimes(b, containerLogs(b, host), round(2, 1))) == 2
				})
				logs := containerLogs(b, host)
				if failed == 0 {
					failed = uptimes(b, logs, regexp.MustCompile(`^\[\d\] fail ([0-9.]+) `))[0]
				}
				d := slices.Max(uptimes(b, logs, round(2, 1))) - failed
				took = append(took, d)
				b.Logf("%s trial %d: %.2f s from the failure to every rank of the new round", tt.name, trial, d)
			}
			b.ReportMetric(median(took)*1000, "ms-restart")
		})
	}
}
