package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkNodeLoss measures how fast a job learns of a lost node, with real
// agents on three hosts in network namespaces (a hosts the store): node c's
// agent SIGKILLed, and node c's link taken down. For each trial it times,
// from just before the kill or the cut, the launcher's exit and the end of
// the job's last worker on the surviving nodes a and b. After the trials it
// reads the idle RSS of the three agents, gossip on, no job.
//
//	go test -run XXX -bench NodeLoss -benchtime 1x -timeout 20m -v ./e2e
//
// MUSTER_NODELOSS_TRIALS sets the trials of each kind (20).
func BenchmarkNodeLoss(b *testing.B) {
	trials := 20
	if s := os.Getenv("MUSTER_NODELOSS_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("MUSTER_NODELOSS_TRIALS=%q: want a count above 0", s)
		}
		trials = n
	}
	nw := newNetwork(b, 3)
	agents := nw.startCluster()
	c := nw.host("c")

	kinds := []struct {
		name    string
		lose    func()
		restore func()
	}{
		{"kill", func() {
			if err := agents["c"].cmd.Process.Kill(); err != nil {
				b.Fatal(err)
			}
		}, func() {
			agents["c"].cmd.Wait()
			agents["c"] = nw.join(c, nw.token)
		}},
		{"cut", func() { nw.cut(c) }, func() { nw.heal(c) }},
	}
	samples := map[string][]nodeLossSample{}
	start := time.Now()
	for _, k := range kinds {
		for i := range trials {
			var s nodeLossSample
			for try := 1; ; try++ {
				var err error
				if s, err = nodeLossTrial(nw, c, fmt.Sprintf("%s-%d", k.name, i), k.lose); err == nil {
					break
				}
				if try == 3 {
					b.Fatal(err)
				}
				b.Logf("%s trial %d, try %d: %v", k.name, i+1, try, err)
				nw.waitReady(3, 60*time.Second)
			}
			k.restore()
			readyAt := time.Now()
			nw.waitReady(3, 60*time.Second)
			s.restore = time.Since(readyAt)
			samples[k.name] = append(samples[k.name], s)
			b.Logf("%s %2d: launcher exit %6.1f ms, workers on a, b gone %6.1f ms, named by %s, leftover on c %d, 3 nodes ready again after %.1f s",
				k.name, i+1, ms(s.exit), ms(s.gone), s.signal, s.leftover, s.restore.Seconds())
			if k.name == "kill" && s.signal == "gossip" {
				// What the store saw of c, to tell a late stream break from a late probe.
				var seen []string
				for _, l := range strings.Split(agents["a"].logText(), "\n") {
					if strings.Contains(l, `"node":"c"`) {
						seen = append(seen, l)
					}
				}
				b.Logf("the store's last lines on c:\n%s", strings.Join(seen[max(0, len(seen)-4):], "\n"))
			}
		}
	}
	trialTime := time.Since(start)

	var table strings.Builder
	fmt.Fprintf(&table, "%d trials each; p99 by nearest rank (for 20 samples the 20th, the max)\n", trials)
	fmt.Fprintf(&table, "%-34s %9s %9s %9s   %s\n", "measure", "p50", "p99", "max", "loss named by")
	for _, k := range kinds {
		ss := samples[k.name]
		named := map[string]int{}
		var exits, gones []time.Duration
		for _, s := range ss {
			exits = append(exits, s.exit)
			gones = append(gones, s.gone)
			named[s.signal]++
		}
		by := fmt.Sprintf("agent connection closed %d, no gossip ack %d, silent to store and peers %d", named["connection"], named["gossip"], named["silence"])
		for _, m := range []struct {
			what, unit string
			d          []time.Duration
		}{
			{k.name + " → launcher exit", k.name + "-exit", exits},
			{k.name + " → surviving workers gone", k.name + "-gone", gones},
		} {
			p50, p99, mx := nearestRank(m.d, 50), nearestRank(m.d, 99), slices.Max(m.d)
			fmt.Fprintf(&table, "%-34s %6.1f ms %6.1f ms %6.1f ms   %s\n", m.what, ms(p50), ms(p99), ms(mx), by)
			b.ReportMetric(ms(p50), m.unit+"-p50-ms")
			b.ReportMetric(ms(p99), m.unit+"-p99-ms")
			b.ReportMetric(ms(mx), m.unit+"-max-ms")
		}
		b.ReportMetric(float64(named["connection"]), k.name+"-by-conn-trials")
		b.ReportMetric(float64(named["gossip"]), k.name+"-by-gossip-trials")
	}
	b.Logf("node loss, %s of trials:\n%s", trialTime.Round(time.Second), table.String())

	// Idle: no job, gossip on, for 30 s.
	const idle = 30 * time.Second
	time.Sleep(idle)
	var rss strings.Builder
	fmt.Fprintf(&rss, "%-6s %8s %12s %12s\n", "agent", "pid", "VmRSS", "VmHWM")
	for _, name := range []string{"a", "b", "c"} {
		pid := agents[name].cmd.Process.Pid
		st := procStatus(b, pid)
		fmt.Fprintf(&rss, "%-6s %8d %8.1f MiB %8.1f MiB\n", name, pid, st["VmRSS"]/1024, st["VmHWM"]/1024)
		b.ReportMetric(st["VmRSS"]/1024, name+"-VmRSS-MiB")
		b.ReportMetric(st["VmHWM"]/1024, name+"-VmHWM-MiB")
	}
	b.Logf("agents after %s idle with gossip on (VmHWM is the peak since the agent started; c's agent was last restarted by the kill trials):\n%s", idle, rss.String())
	b.ReportMetric(0, "ns/op")
}

// nodeLossSample is one trial.
type nodeLossSample struct {
	exit     time.Duration // until the launcher exited
	gone     time.Duration // until no worker of the job was left on a and b
	signal   string        // what the launcher named: "connection" or "gossip"
	leftover int           // the job's processes still on c 5 s after, killed by the benchmark
	restore  time.Duration // from the restore until a 3-node job ran
}

// nodeLossTrial starts a 3-node job, loses node c with lose once its three
// workers run, and times the launcher's exit and the end of the workers on
// a and b. A job that ends before its workers all run is an error: the
// cluster was not whole yet, and the trial is tried again.
func nodeLossTrial(nw *network, c *host, name string, lose func()) (nodeLossSample, error) {
	b := nw.t
	b.Helper()
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-nodeloss-%s", time.Now().UnixNano(), name)
	cmd, _, errb := nw.launcher("run", "-n", "3", "--nproc", "1", "-x", marker, "--", "sleep", "1000")
	exited := make(chan time.Time, 1)
	go func() { cmd.Wait(); exited <- time.Now() }()

	var survivors []int
	for deadline := time.Now().Add(20 * time.Second); ; {
		procs := markedProcesses(b, marker)
		if len(procs) == 3 {
			for pid, ns := range procs {
				if ns == nw.host("a").netns || ns == nw.host("b").netns {
					survivors = append(survivors, pid)
				}
			}
			break
		}
		select {
		case <-exited:
			return nodeLossSample{}, fmt.Errorf("the job ended before its 3 workers ran: exit %d, stderr:\n%s", cmd.ProcessState.ExitCode(), errb.String())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("the job's 3 workers never ran: %d running", len(procs))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(survivors) != 2 {
		b.Fatalf("%d of the job's workers on a and b, want 2", len(survivors))
	}

	t0 := time.Now()
	lose()
	var exitAt, goneAt time.Time
	for deadline := t0.Add(30 * time.Second); exitAt.IsZero() || goneAt.IsZero(); {
		if goneAt.IsZero() && !slices.ContainsFunc(survivors, alive) {
			goneAt = time.Now()
		}
		if exitAt.IsZero() {
			select {
			case exitAt = <-exited:
			default:
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("30 s after losing c: launcher exited %v, workers on a and b gone %v; stderr:\n%s", !exitAt.IsZero(), !goneAt.IsZero(), errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	s := nodeLossSample{exit: exitAt.Sub(t0), gone: goneAt.Sub(t0)}

	stderr, code := errb.String(), cmd.ProcessState.ExitCode()
	switch {
	case code == 0:
		b.Fatalf("the launcher exited 0 with c lost; stderr:\n%s", stderr)
	case strings.Contains(stderr, "node c lost: agent connection closed"):
		s.signal = "connection"
	case strings.Contains(stderr, "node c lost: no gossip ack"):
		s.signal = "gossip"
	case strings.Contains(stderr, "node c lost: nothing from its agent"):
		s.signal = "silence" // the store's own watch, its peers' probes confirming
	default:
		b.Fatalf("exit %d without c named lost; stderr:\n%s", code, stderr)
	}

	// Nothing of the job may be left on a and b; on c, what is left after
	// 5 s is counted and killed, so that trials do not pile up.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		procs := markedProcesses(b, marker)
		if len(procs) == 0 {
			break
		}
		if time.Now().Before(deadline) {
			continue
		}
		for pid, ns := range procs {
			if ns != c.netns {
				b.Fatalf("worker %d of the job still runs in %s", pid, ns)
			}
			syscall.Kill(pid, syscall.SIGKILL)
			s.leftover++
		}
		break
	}
	return s, nil
}

// markedProcesses maps the live processes whose environment holds marker
// to their network namespaces.
func markedProcesses(t testing.TB, marker string) map[int]string {
	procs := map[int]string{}
	for _, pid := range jobProcesses(t, marker) {
		if ns, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net")); err == nil {
			procs[pid] = ns
		}
	}
	return procs
}

// alive reports whether process pid exists and is no zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !isZombie(stat)
}

// nearestRank is the p-th percentile of d by nearest rank: the
// ceil(p/100·n)-th smallest.
func nearestRank(d []time.Duration, p float64) time.Duration {
	s := slices.Sorted(slices.Values(d))
	k := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(k, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// procStatus reads the kB fields of /proc/PID/status.
func procStatus(b testing.TB, pid int) map[string]float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := map[string]float64{}
	for _, l := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(l, ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			fields[name] = v
		}
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "agent" {
		b.Fatalf("process %d is %q, not the agent", pid, comm)
	}
	return fields
}

// BenchmarkCutDetection measures how long a job takes to stop when one of
// its nodes is cut off (its link taken down), at several cluster sizes: N
// agents, each in a network namespace of its own on one bridge, a hosting
// the store, with the default node timeout. Each trial runs a 2-node job on
// a and another node, cuts that node, times the launcher's exit from just
// before the cut, and brings the link back up; the cut node changes every
// trial, so that each has time to come back before its next turn.
//
//	go test -run XXX -bench CutDetection -benchtime 1x -timeout 60m -v ./e2e
//
// MUSTER_CUT_SIZES=8,40 picks the sizes (at most 254), and
// MUSTER_NODELOSS_TRIALS the trials at each (20).
func BenchmarkCutDetection(b *testing.B) {
	trials := 20
	if s := os.Getenv("MUSTER_NODELOSS_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("MUSTER_NODELOSS_TRIALS=%q: want a count above 0", s)
		}
		trials = n
	}
	sizes := []int{8, 40}
	if s := os.Getenv("MUSTER_CUT_SIZES"); s != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 3 || n > 254 {
				b.Fatalf("MUSTER_CUT_SIZES: %q: want 3 to 254", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			nw := newNetwork(b, n)
			start := time.Now()
			nw.startHead()
			for _, h := range nw.hosts[1:] {
				nw.join(h, nw.token)
			}
			nw.waitReady(n, 5*time.Minute)
			b.Logf("%d agents ready after %.1f s", n, time.Since(start).Seconds())
			var exits []time.Duration
			for i := range trials {
				victim := nw.hosts[1+i%(n-1)]
				d, named, err := cutTrial(nw, victim)
				if err != nil {
					b.Fatalf("trial %d, %s cut: %v", i+1, victim.name, err)
				}
				exits = append(exits, d)
				b.Logf("N=%d trial %2d: %s cut, launcher exit after %.2f s: %s", n, i+1, victim.name, d.Seconds(), named)
			}
			p50, mx := nearestRank(exits, 50), slices.Max(exits)
			b.Logf("N=%d, %d trials: cut → launcher exit p50 %.2f s, max %.2f s, min %.2f s", n, trials, p50.Seconds(), mx.Seconds(), slices.Min(exits).Seconds())
			b.ReportMetric(p50.Seconds(), "cut-exit-p50-s")
			b.ReportMetric(mx.Seconds(), "cut-exit-max-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// cutTrial runs a 2-node job on the head and victim, cuts victim's link
// once both workers run, and returns how long the launcher took to exit
// with victim named lost, and the launcher's message. The link is up again
// when it returns.
func cutTrial(nw *network, victim *host) (time.Duration, string, error) {
	b := nw.t
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-cut-%s", time.Now().UnixNano(), victim.name)
	cmd, _, errb := nw.launcher("run", "-H", nw.hosts[0].name+","+victim.name, "--nproc", "1", "-x", marker, "--", "sleep", "1000")
	exited := make(chan time.Time, 1)
	go func() { cmd.Wait(); exited <- time.Now() }()
	for deadline := time.Now().Add(2 * time.Minute); len(markedProcesses(b, marker)) < 2; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return 0, "", fmt.Errorf("the job ended before its workers ran: %s", errb.String())
		default:
		}
		if time.Now().After(deadline) {
			return 0, "", fmt.Errorf("the job's 2 workers never ran")
		}
	}
	t0 := time.Now()
	nw.cut(victim)
	defer nw.heal(victim)
	select {
	case at := <-exited:
		if !strings.Contains(errb.String(), "node "+victim.name+" lost") {
			return 0, "", fmt.Errorf("exit %d without %s named lost: %s", cmd.ProcessState.ExitCode(), victim.name, errb.String())
		}
		return at.Sub(t0), strings.TrimSpace(errb.String()), nil
	case <-time.After(time.Minute):
		return 0, "", fmt.Errorf("the job went on a minute after the cut")
	}
}
