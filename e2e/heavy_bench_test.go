package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The heavy benchmarks: many agents in network namespaces on this one
// machine, for minutes. They are benchmarks, not tests, so that `go test`
// (and CI) never runs them: together they take over ten minutes and load
// every CPU, which would slow and fail the tests around them. One short
// form of the concurrent jobs, TestNetnsConcurrentJobs, is a test.

// heavyCluster starts n agents, each on a host of its own, and waits until
// all are registered.
func heavyCluster(b testing.TB, n int) *network {
	b.Helper()
	nw := newNetwork(b, n)
	start := time.Now()
	agents := []*agent{nw.startHead()}
	for _, h := range nw.hosts[1:] {
		agents = append(agents, nw.join(h, nw.token))
	}
	nw.waitReady(n, 5*time.Minute)
	nw.stopTogetherAtCleanup(agents)
	b.Logf("%d agents ready after %.1f s", n, time.Since(start).Seconds())
	return nw
}

// jobOutcome is how one launcher ended.
type jobOutcome struct {
	code   int
	stdout string
	stderr string
	took   time.Duration
}

// runJobs runs jobs at once, each the launcher's arguments after "run",
// and returns how each ended.
func runJobs(nw *network, jobs [][]string) []jobOutcome {
	out := make([]jobOutcome, len(jobs))
	var wg sync.WaitGroup
	for i, args := range jobs {
		cmd, stdout, stderr := nw.launcher(append([]string{"run"}, args...)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			cmd.Wait()
			out[i] = jobOutcome{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String(), time.Since(start)}
		}()
	}
	wg.Wait()
	return out
}

// BenchmarkConcurrentJobs runs 20 jobs at once, each on all of 30 hosts
// (one worker a node that sleeps, so 600 workers), on this machine's CPUs.
// Every job must succeed and every rank print its line.
//
//	go test -run XXX -bench ConcurrentJobs -benchtime 1x -timeout 30m -v ./e2e
//
// MUSTER_E2E_HOSTS (30), MUSTER_E2E_JOBS (20) and MUSTER_E2E_JOB_SECONDS
// (30, how long each worker sleeps) change the load.
func BenchmarkConcurrentJobs(b *testing.B) {
	hosts, jobs, secs := envInt(b, "MUSTER_E2E_HOSTS", 30), envInt(b, "MUSTER_E2E_JOBS", 20), envInt(b, "MUSTER_E2E_JOB_SECONDS", 30)
	failed, slowest := concurrentJobs(b, hosts, jobs, secs)
	b.ReportMetric(float64(failed), "failed-jobs")
	b.ReportMetric(slowest.Seconds(), "slowest-job-s")
	b.ReportMetric(0, "ns/op")
}

// TestNetnsConcurrentJobs is a lighter load with workers that sleep 3 s:
// 12 jobs at once, each on all of 30 hosts sharing this machine's CPUs,
// and not one may fail. It runs alone, before the parallel tests: its
// launches keep every CPU busy for seconds, which would fail the tests that
// time a pause or a silence against the node timeout. Twenty jobs, the
// benchmark's, starved a two-CPU machine past any node timeout (13 s
// without a gossip ack).
func TestNetnsConcurrentJobs(t *testing.T) {
	concurrentJobs(t, 30, 12, 3)
}

// concurrentJobs runs jobs jobs at once, each on all hosts, whose workers
// sleep secs, and fails tb for each that does not succeed with every rank.
func concurrentJobs(b testing.TB, hosts, jobs, secs int) (failed int, slowest time.Duration) {
	nw := heavyCluster(b, hosts)
	var args [][]string
	for range jobs {
		args = append(args, []string{"-n", strconv.Itoa(hosts), "--nproc", "1", "--wait-timeout", "5m", "--",
			"sh", "-c", fmt.Sprintf(`sleep %d; echo "rank $RANK ok"`, secs)})
	}
	start := time.Now()
	outs := runJobs(nw, args)
	for i, o := range outs {
		ranks := strings.Count(o.stdout, " ok\n")
		slowest = max(slowest, o.took)
		if o.code != 0 || ranks != hosts {
			failed++
			b.Errorf("job %d: exit %d, %d of %d ranks ok, after %.1f s; stderr:\n%s", i, o.code, ranks, hosts, o.took.Seconds(), o.stderr)
		}
	}
	b.Logf("%d jobs of %d nodes at once on %d hosts (%d CPUs), workers sleeping %d s: %d succeeded, %d failed; all done after %.1f s, the slowest launcher %.1f s",
		jobs, hosts, hosts, runtime.NumCPU(), secs, jobs-failed, failed, time.Since(start).Seconds(), slowest.Seconds())
	return failed, slowest
}

// BenchmarkSoak keeps 40 hosts running concurrent jobs for 10 minutes
// while busy loops (twice the CPUs) keep every CPU busy, and counts false
// kills: jobs that failed, nodes the store took as lost, and nodes the
// store or an agent suspected. The goal is none of the first two.
// Each turn runs 4 jobs at once, each on 10 hosts of its own (all 40 busy),
// each worker sleeping 20 s; turns follow each other until the time is up.
//
//	go test -run XXX -bench Soak -benchtime 1x -timeout 30m -v ./e2e
//
// MUSTER_E2E_HOSTS (40) and MUSTER_E2E_SOAK (10m) change it.
func BenchmarkSoak(b *testing.B) {
	hosts := envInt(b, "MUSTER_E2E_HOSTS", 40)
	soak := 10 * time.Minute
	if s := os.Getenv("MUSTER_E2E_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			b.Fatalf("MUSTER_E2E_SOAK=%q: want a duration such as 10m", s)
		}
		soak = d
	}
	const perJob, secs = 10, 20
	nw := heavyCluster(b, hosts)
	for range 2 * runtime.NumCPU() {
		burner := exec.Command("sh", "-c", "while :; do :; done")
		if err := burner.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { burner.Process.Signal(syscall.SIGKILL); burner.Wait() })
	}
	start := time.Now()
	ok, failed, turns := 0, 0, 0
	for time.Since(start) < soak {
		var args [][]string
		for k := 0; k+perJob <= hosts; k += perJob {
			var names []string
			for _, h := range nw.hosts[k : k+perJob] {
				names = append(names, h.name)
			}
			args = append(args, []string{"-H", strings.Join(names, ","), "--nproc", "1", "--wait-timeout", "2m", "--",
				"sh", "-c", fmt.Sprintf(`sleep %d; echo "rank $RANK ok"`, secs)})
		}
		for i, o := range runJobs(nw, args) {
			if o.code == 0 && strings.Count(o.stdout, " ok\n") == perJob {
				ok++
				continue
			}
			failed++
			b.Errorf("turn %d, job %d: exit %d after %.1f s; stderr:\n%s", turns, i, o.code, o.took.Seconds(), o.stderr)
		}
		turns++
	}
	took := time.Since(start)
	load, _ := os.ReadFile("/proc/loadavg")
	// What the store and the agents said: the store logs its suspicions
	// and losses; agents log a peer gossip found dead.
	var suspected, removed, peerLost int
	for _, f := range agentLogs(nw) {
		suspected += strings.Count(f, `"msg":"node suspected"`)
		removed += strings.Count(f, `"reason":"no gossip ack`)
		peerLost += strings.Count(f, `"msg":"gossip lost a peer`)
	}
	b.Logf("soak of %s at %d hosts, %d busy loops on %d CPUs (load average %s): %d turns of %d jobs, %d succeeded, %d failed; "+
		"store suspected a node %d times, took %d as lost by gossip; agents saw a peer dead %d times",
		took.Round(time.Second), hosts, 2*runtime.NumCPU(), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "),
		turns, hosts/perJob, ok, failed, suspected, removed, peerLost)
	b.ReportMetric(float64(failed), "failed-jobs")
	b.ReportMetric(float64(removed), "nodes-lost")
	b.ReportMetric(float64(suspected), "suspicions")
	b.ReportMetric(0, "ns/op")
}

// agentLogs reads every agent's log of the network.
func agentLogs(nw *network) []string {
	var logs []string
	entries, _ := os.ReadDir(nw.dir)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "agent-") {
			continue
		}
		if b, err := os.ReadFile(nw.dir + "/" + e.Name() + "/log"); err == nil {
			logs = append(logs, string(b))
		}
	}
	return logs
}

// envInt reads a count above 0 from the environment variable name, def
// when it is not set.
func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a count above 0", name, s)
	}
	return n
}
