package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// Nothing lost, nothing run twice, checked as Jepsen would: a workload of
// clients (50 launchers on the worker hosts d, e and f, each submitting
// one two-node job and following it to its end, --max-restarts 1) runs
// against the store replicated on a, b and c while a nemesis disturbs its
// leader: kill -9 and a restart once a new leader is elected; a partition
// of 8 s; kill -9 and a restart at once. A checker then reads the history
// the clients, the workers and each replica left behind.
//
// The workers leave the ground truth: each takes an exclusive lock on a
// file of its (job, rank) for as long as it runs, and says TWICE when
// another holds it; each appends "JOB ROUND RANK LAUNCHER" to one file
// that every namespace host sees as it starts, and "END ..." as it ends.
// The checker wants:
//   - no rank of a job running twice at once, no (job, round, rank) twice,
//     no launcher's one submission run as two jobs, no job run again once
//     every rank of a round succeeded;
//   - every launcher that exited 0 given a job id, whose last round ran
//     each rank once to its end, and which every replica holds as
//     succeeded; every launcher that failed saying why, and not stopped
//     for a launcher gone away (all stayed); no launcher hung;
//   - no job run a second round, and no worker node fencing its workers:
//     the nemesis touched only the replicas, never a job's nodes;
//   - at least 40 of the 50 launchers succeeding;
//   - every replica, asked alone, holding the same jobs in the same final
//     states, every acknowledged job among them, and every job that ran.
func TestNetnsReplicasLoseNothingRunNothingTwice(t *testing.T) {
	t.Parallel()
	r := startReplicated(t, 6)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")

	const (
		clients = 50
		// pace spreads the launchers over the nemesis's disturbances, so
		// that submissions and running jobs meet each of them.
		pace      = 450 * time.Millisecond
		partition = 8 * time.Second
	)
	// $1 is the launcher's index; the round is TORCHELASTIC_RESTART_COUNT
	// (the job's restarts; the rounds of a job of fixed size all count).
	script := `j=$MUSTER_JOB_ID r=$TORCHELASTIC_RESTART_COUNT k=$RANK i=$1
exec 9>` + dir + `/$j-$k.lock
if ! flock -n 9; then echo "TWICE $j $r $k $i" >>` + runs + `; echo TWICE; exit 42; fi
echo "$j $r $k $i" >>` + runs + `
sleep 2
echo "END $j $r $k $i" >>` + runs + `
exit 0`
	workers := []*host{r.host("d"), r.host("e"), r.host("f")}
	pairs := []string{"d,e", "e,f", "f,d"}

	// The workload: each client's history.
	type client struct {
		idx            int
		on, hosts      string
		events         string
		cmd            *exec.Cmd
		out, errb      bytes.Buffer
		started, ended time.Time
		code           int
		hung           bool
		startErr       error
	}
	cs := make([]*client, clients)
	var mu sync.Mutex // guards cs[i].cmd against the cleanup
	stopped := make(chan struct{})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		close(stopped) // a test that failed early starts no more
		for _, c := range cs {
			if c != nil && c.cmd != nil && c.cmd.Process != nil {
				c.cmd.Process.Kill()
			}
		}
	})
	done := make(chan *client, clients)
	workloadStarted := time.Now()
	go func() {
		for i := range clients {
			select {
			case <-time.After(time.Until(workloadStarted.Add(time.Duration(i) * pace))): // the workload's pace
			case <-stopped:
				return
			}
			c := &client{idx: i, on: workers[i%3].name, hosts: pairs[(i/3)%3], events: filepath.Join(dir, fmt.Sprintf("events-%02d", i))}
			args := []string{"netns", "exec", workers[i%3].ns, launcherBin, "run",
				"--cluster", r.replicaAddrs(), "--token-file", r.token, "--tls-ca", r.ca,
				"--events", c.events, "-H", c.hosts, "--nnodes", "2", "--max-restarts", "1",
				"--", "sh", "-c", script, "sh", strconv.Itoa(i)}
			c.cmd = exec.Command("ip", args...)
			c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.errb
			c.started = time.Now()
			mu.Lock()
			select {
			case <-stopped:
				mu.Unlock()
				return
			default:
			}
			cs[i] = c
			c.startErr = c.cmd.Start()
			mu.Unlock()
			if c.startErr != nil {
				done <- c
				continue
			}
			go func() {
				c.cmd.Wait()
				c.ended = time.Now()
				c.code = c.cmd.ProcessState.ExitCode()
				done <- c
			}()
		}
	}()

	// The nemesis, on the test's goroutine: each disturbance waits for a
	// leader again before the next.
	var disturbances []string
	testwait.Until(t, 30*time.Second, "the first jobs running", func() bool {
		b, _ := os.ReadFile(runs)
		return bytes.Count(b, []byte("\n")) >= 4
	})
	// (1) kill -9 the leader, wait for another, then restart it.
	l := r.soleLeader(t, "", 15*time.Second)
	r.killReplica(l)
	next := r.soleLeader(t, l, 20*time.Second)
	r.restartReplica(r.host(l))
	r.caughtUp(t, r.host(l), next, 20*time.Second)
	disturbances = append(disturbances, fmt.Sprintf("%.1fs: kill -9 leader %s, %s led, %s restarted", time.Since(workloadStarted).Seconds(), l, next, l))

	// (2) partition the leader away, past raft's election, and heal.
	l = r.soleLeader(t, "", 15*time.Second)
	cutAt := time.Now()
	r.dropAll(r.host(l))
	during := r.soleLeaderAmong(t, l, partition+10*time.Second)
	time.Sleep(time.Until(cutAt.Add(partition))) // how long the partition lasts
	r.acceptAll(r.host(l))
	next = r.soleLeader(t, "", 20*time.Second)
	r.caughtUp(t, r.host(l), next, 20*time.Second)
	disturbances = append(disturbances, fmt.Sprintf("%.1fs: leader %s cut off for %s, %s led, healed, %s led",
		time.Since(workloadStarted).Seconds(), l, partition, during, next))

	// (3) kill -9 the leader and restart it at once, election or not.
	l = r.soleLeader(t, "", 15*time.Second)
	r.killReplica(l)
	r.restartReplica(r.host(l))
	next = r.soleLeader(t, "", 20*time.Second)
	r.caughtUp(t, r.host(l), next, 20*time.Second)
	disturbances = append(disturbances, fmt.Sprintf("%.1fs: kill -9 leader %s and restart at once, %s led", time.Since(workloadStarted).Seconds(), l, next))
	for _, d := range disturbances {
		t.Logf("nemesis: %s", d)
	}

	// Every launcher ends, within a bound: one that does not hangs.
	deadline := time.After(time.Until(workloadStarted.Add(clients*pace + 45*time.Second)))
	ended := map[int]bool{}
	for len(ended) < clients {
		select {
		case c := <-done:
			ended[c.idx] = true
			continue
		case <-deadline:
		}
		mu.Lock()
		for _, c := range cs {
			if c != nil && c.startErr == nil && !ended[c.idx] {
				c.hung = true
				c.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, on stderr
			}
		}
		mu.Unlock()
		for len(ended) < clients {
			select {
			case c := <-done:
				ended[c.idx] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("%d launchers did not end even on SIGQUIT", clients-len(ended))
			}
		}
	}

	// The checker. First what the workers left.
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	type jrr struct {
		job   string
		round int
		rank  int
	}
	ran := map[jrr]int{}               // starts of each rank of each round
	finished := map[jrr]bool{}         // ranks that ran to their end
	jobOf := map[string]int{}          // job → launcher index, as its workers said
	jobsOfClient := map[int][]string{} // launcher index → jobs that ran for it
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		end := len(f) > 0 && f[0] == "END"
		if end {
			f = f[1:]
		}
		if len(f) > 0 && f[0] == "TWICE" {
			t.Errorf("a rank ran twice at once: %s", line)
			f = f[1:]
		}
		if len(f) != 4 {
			t.Errorf("bad line in runs: %q", line)
			continue
		}
		round, _ := strconv.Atoi(f[1])
		rank, _ := strconv.Atoi(f[2])
		idx, _ := strconv.Atoi(f[3])
		if end {
			finished[jrr{f[0], round, rank}] = true
			continue
		}
		ran[jrr{f[0], round, rank}]++
		if i, ok := jobOf[f[0]]; ok && i != idx {
			t.Errorf("job %s ran for launchers %d and %d", f[0], i, idx)
		}
		if _, ok := jobOf[f[0]]; !ok {
			jobOf[f[0]] = idx
			jobsOfClient[idx] = append(jobsOfClient[idx], f[0])
		}
	}
	for k, n := range ran {
		if n > 1 {
			t.Errorf("job %s round %d rank %d ran %d times", k.job, k.round, k.rank, n)
		}
		if k.rank == 0 && k.round > 0 && finished[jrr{k.job, k.round - 1, 0}] && finished[jrr{k.job, k.round - 1, 1}] {
			t.Errorf("job %s ran round %d after every rank of round %d had succeeded: the job ran twice", k.job, k.round, k.round-1)
		}
	}
	for idx, jobs := range jobsOfClient {
		if len(jobs) > 1 {
			t.Errorf("launcher %d's one submission ran as %d jobs: %v", idx, len(jobs), jobs)
		}
	}

	// Then each client's own account.
	var ok, failed []*client
	acked := map[string]int{} // job → launcher index, for every job a launcher was given
	for _, c := range cs {
		if c.startErr != nil {
			t.Fatalf("launcher %d: %v", c.idx, c.startErr)
		}
		job := submittedJob(c.events)
		if job != "" {
			acked[job] = c.idx
		}
		if c.hung {
			t.Errorf("launcher %d (on %s, job %q) hung past the bound; stderr and goroutines:\n%s", c.idx, c.on, job, c.errb.String())
			continue
		}
		if strings.Contains(c.out.String(), "TWICE") {
			t.Errorf("launcher %d: a worker of job %s found its rank running already:\n%s", c.idx, job, c.out.String())
		}
		if c.code != 0 {
			failed = append(failed, c)
			why := strings.TrimSpace(c.errb.String())
			if why == "" || strings.Contains(why, "goroutine ") || strings.Contains(why, "panic:") {
				t.Errorf("launcher %d (job %q) exited %d without saying why in a line; stderr:\n%s", c.idx, job, c.code, c.errb.String())
			}
			// Every launcher followed its job to the end: none went away.
			if strings.Contains(why, "the launcher that submitted it went away") {
				t.Errorf("launcher %d followed job %s to its end, but the store stopped the job as if its launcher had gone away: %s", c.idx, job, lastLine(why))
			}
			if job != "" && len(jobsOfClient[c.idx]) > 0 && jobsOfClient[c.idx][0] != job {
				t.Errorf("launcher %d followed job %s, but job %s ran for it", c.idx, job, jobsOfClient[c.idx][0])
			}
			continue
		}
		ok = append(ok, c)
		if job == "" {
			t.Errorf("launcher %d exited 0 without a job id in its events; stderr:\n%s", c.idx, c.errb.String())
			continue
		}
		if got := jobsOfClient[c.idx]; len(got) != 1 || got[0] != job {
			t.Errorf("launcher %d succeeded with job %s, but the jobs that ran for it are %v", c.idx, job, got)
			continue
		}
		// Its last round ran both ranks; every round ran each rank once at
		// most (counted above).
		last := -1
		for k := range ran {
			if k.job == job {
				last = max(last, k.round)
			}
		}
		for rank := range 2 {
			if k := (jrr{job, last, rank}); ran[k] != 1 || !finished[k] {
				t.Errorf("launcher %d succeeded, but job %s's last round %d ran rank %d %d times, to its end: %v", c.idx, job, last, rank, ran[k], finished[k])
			}
		}
	}
	// Only the replicas were disturbed, none of the jobs' nodes: no job had
	// cause to start a round again, nor a worker node to fence its workers.
	restarted := map[string][]string{} // why round 0 stopped → the jobs
	nRestarted := 0
	for k := range ran {
		if k.round != 1 || k.rank != 0 && ran[jrr{k.job, 1, 0}] > 0 {
			continue
		}
		nRestarted++
		why := "(its launcher did not say)"
		for _, l := range strings.Split(cs[jobOf[k.job]].errb.String(), "\n") {
			if _, after, found := strings.Cut(l, "round 0 stops: "); found {
				why, _, _ = strings.Cut(after, "; restart ")
				break
			}
		}
		restarted[why] = append(restarted[why], fmt.Sprintf("%s (launcher %d)", k.job, jobOf[k.job]))
	}
	for why, jobs := range restarted {
		sort.Strings(jobs)
		t.Errorf("%d jobs ran a second round though none of their nodes was disturbed, only the store's leader; round 0 stopped: %s; jobs: %s",
			len(jobs), why, strings.Join(jobs, ", "))
	}
	for name, a := range r.workers {
		if strings.Contains(a.logText(), "its workers are stopped") {
			t.Errorf("worker node %s fenced its workers: it found no leader within the fence bound", name)
		}
	}
	t.Logf("%d of %d launchers succeeded, %d failed; %d jobs ran, %d of them more than one round", len(ok), clients, len(failed), len(jobOf), nRestarted)
	for _, c := range failed {
		t.Logf("launcher %d (on %s, -H %s) exited %d: %s", c.idx, c.on, c.hosts, c.code, lastLine(c.errb.String()))
	}
	if len(ok) < 40 {
		var b strings.Builder
		for _, c := range failed {
			fmt.Fprintf(&b, "launcher %d exited %d, stderr:\n%s\n", c.idx, c.code, c.errb.String())
		}
		t.Errorf("only %d of %d launchers succeeded through the nemesis:\n%s", len(ok), clients, b.String())
	}

	// Last, each replica's own history: the same jobs in the same final
	// states on each, once the followers caught up.
	var tables map[string]map[string]jepsenJob
	var why string
	caught := func() bool {
		tables, why = map[string]map[string]jepsenJob{}, ""
		for _, h := range r.hosts[:3] {
			jobs, err := r.jobsOf(h)
			if err != nil {
				why = fmt.Sprintf("replica %s: %v", h.name, err)
				return false
			}
			tables[h.name] = jobs
		}
		for _, name := range []string{"b", "c"} {
			if d := diffJobs(tables["a"], tables[name]); d != "" {
				why = "replicas a and " + name + " differ: " + d
				return false
			}
		}
		for id, j := range tables["a"] {
			if !slices.Contains([]string{"succeeded", "failed", "cancelled"}, j.State) {
				why = fmt.Sprintf("job %s (launcher %d) is still %s after its launcher ended", id, j.client, j.State)
				return false
			}
		}
		return true
	}
	converged := time.Now().Add(30 * time.Second)
	for !caught() {
		if time.Now().After(converged) {
			t.Fatalf("the replicas' histories did not agree within 30 s: %s", why)
		}
		time.Sleep(250 * time.Millisecond)
	}
	table := tables["a"]
	for job, idx := range acked {
		j, listed := table[job]
		switch {
		case !listed:
			t.Errorf("job %s, acknowledged to launcher %d, is in no replica's history", job, idx)
		case j.client != idx:
			t.Errorf("job %s, acknowledged to launcher %d, is launcher %d's in the replicas' history", job, idx, j.client)
		}
	}
	for _, c := range ok {
		if job := submittedJob(c.events); table[job].State != "succeeded" {
			t.Errorf("launcher %d exited 0, but the replicas hold job %s as %q", c.idx, job, table[job].State)
		}
	}
	perClient := map[int][]string{}
	for id, j := range table {
		perClient[j.client] = append(perClient[j.client], id)
	}
	for idx, jobs := range perClient {
		if len(jobs) > 1 {
			sort.Strings(jobs)
			t.Errorf("launcher %d's one submission is %d jobs in the replicas' history: %v", idx, len(jobs), jobs)
		}
	}
	for job := range jobOf {
		if _, listed := table[job]; !listed {
			t.Errorf("job %s ran, but is in no replica's history", job)
		}
	}
	t.Logf("the three replicas hold the same %d jobs of the workload", len(table))
}

// jepsenJob is a job of the workload as a replica lists it.
type jepsenJob struct {
	State  string
	client int // the launcher index its command carries
}

// jobsOf is replica h's own table of the workload's jobs (those whose
// command is sh -c SCRIPT sh INDEX), asked of h alone: a follower answers
// from its copy.
func (r *replicated) jobsOf(h *host) (map[string]jepsenJob, error) {
	cmd := exec.Command("ip", "netns", "exec", r.host("d").ns, launcherBin, "jobs",
		"--cluster", h.ip+":29400", "--token-file", r.token, "--tls-ca", r.ca, "-o", "json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := runBounded(cmd, 15*time.Second); err != nil {
		return nil, fmt.Errorf("launcher jobs: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	var list struct {
		Items []struct {
			ID      string   `json:"id"`
			State   string   `json:"state"`
			Command []string `json:"command"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		return nil, fmt.Errorf("launcher jobs -o json: %v: %s", err, tail(out.String(), 500))
	}
	jobs := map[string]jepsenJob{}
	for _, j := range list.Items {
		if n := len(j.Command); n == 5 && j.Command[0] == "sh" && j.Command[1] == "-c" {
			idx, err := strconv.Atoi(j.Command[4])
			if err != nil {
				continue
			}
			jobs[j.ID] = jepsenJob{State: j.State, client: idx}
		}
	}
	return jobs, nil
}

// runBounded runs cmd, killing it after d.
func runBounded(cmd *exec.Cmd, d time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	t := time.AfterFunc(d, func() { cmd.Process.Kill() })
	defer t.Stop()
	return cmd.Wait()
}

// diffJobs says how two replicas' tables differ; "" when they do not.
func diffJobs(a, b map[string]jepsenJob) string {
	var d []string
	for id, j := range a {
		if k, ok := b[id]; !ok {
			d = append(d, id+" missing")
		} else if k != j {
			d = append(d, fmt.Sprintf("%s %s vs %s", id, j.State, k.State))
		}
	}
	for id := range b {
		if _, ok := a[id]; !ok {
			d = append(d, id+" extra")
		}
	}
	sort.Strings(d)
	return strings.Join(d, ", ")
}

// submittedJob is the job the launcher's --events file says it followed
// last: "" when it was given none.
func submittedJob(events string) string {
	f, err := os.Open(events)
	if err != nil {
		return ""
	}
	defer f.Close()
	job := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var h struct {
			Type string `json:"type"`
			Job  string `json:"job"`
		}
		if json.Unmarshal(sc.Bytes(), &h) == nil && h.Type == "submitted" {
			job = h.Job
		}
	}
	return job
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// leading are the replicas whose last word on leading says they lead.
func (r *replicated) leading() []string {
	var out []string
	for name, a := range r.replicas {
		log := a.logText()
		if strings.LastIndex(log, `"store leads"`) > strings.LastIndex(log, `"store follows its leader"`) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// soleLeader waits until exactly one replica says it leads, one other than
// not, and returns it.
func (r *replicated) soleLeader(t *testing.T, not string, d time.Duration) string {
	t.Helper()
	var l []string
	testwait.Until(t, d, "one replica leading, not "+not, func() bool {
		l = r.leading()
		return len(l) == 1 && l[0] != not
	})
	return l[0]
}

// soleLeaderAmong waits until exactly one replica other than cut says it
// leads (cut itself may not have heard yet that it does not).
func (r *replicated) soleLeaderAmong(t *testing.T, cut string, d time.Duration) string {
	t.Helper()
	var l []string
	testwait.Until(t, d, "one replica other than "+cut+" leading", func() bool {
		l = slices.DeleteFunc(r.leading(), func(s string) bool { return s == cut })
		return len(l) == 1
	})
	return l[0]
}

// killReplica kills replica name's agent with SIGKILL: it leads no more,
// whatever its log said last.
func (r *replicated) killReplica(name string) {
	r.t.Helper()
	kill9(r.t, r.replicas[name])
	delete(r.replicas, name)
}

// restartReplica starts h's replica again, with the arguments
// startReplicated gave it and its data directory.
func (r *replicated) restartReplica(h *host) {
	r.t.Helper()
	a := r.startAgent(h, h.name, r.replicaArgs(h, r.replicaAddrs())...)
	r.replicas[h.name] = a
	r.stopTogetherAtCleanup([]*agent{a})
}

// caughtUp waits until replica h answers from a table that holds at least
// the jobs the leader's held a moment before.
func (r *replicated) caughtUp(t *testing.T, h *host, leader string, d time.Duration) {
	t.Helper()
	want, err := r.jobsOf(r.host(leader))
	for deadline := time.Now().Add(d); err != nil; want, err = r.jobsOf(r.host(leader)) {
		if time.Now().After(deadline) {
			t.Fatalf("leader %s does not list its jobs: %v", leader, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	deadline := time.Now().Add(d)
	for {
		got, err := r.jobsOf(h)
		missing := 0
		for id := range want {
			if _, ok := got[id]; !ok {
				missing++
			}
		}
		if err == nil && missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s did not catch up with leader %s within %s: %d of %d jobs missing (%v)", h.name, leader, d, missing, len(want), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
