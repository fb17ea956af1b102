package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
)

// failoverAgent is an agent process of the failover benchmark.
type failoverAgent struct {
	name string
	args []string
	dir  string
	cmd  *exec.Cmd
}

func (a *failoverAgent) start(b *testing.B, bin string) {
	b.Helper()
	f, err := os.OpenFile(filepath.Join(a.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	a.cmd = exec.Command(bin, a.args...)
	// Its flags alone configure it: no MUSTER_ variable of this process's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MUSTER_") {
			a.cmd.Env = append(a.cmd.Env, kv)
		}
	}
	a.cmd.Env = append(a.cmd.Env, "TMPDIR="+a.dir)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	// A group of its own: kill -9 takes its shims too, as a dead host would.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
}

// kill9 kills the agent's process group with SIGKILL and reaps the agent.
func (a *failoverAgent) kill9() {
	if a.cmd == nil {
		return
	}
	syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	a.cmd.Wait()
	a.cmd = nil
}

// stop ends the agent gracefully, or kills it after 15 s.
func (a *failoverAgent) stop() {
	if a.cmd == nil {
		return
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	a.cmd = nil
}

func (a *failoverAgent) logTail() string {
	bs, _ := os.ReadFile(filepath.Join(a.dir, "log"))
	if len(bs) > 4000 {
		bs = bs[len(bs)-4000:]
	}
	return string(bs)
}

// BenchmarkFailover kills the leader of a store of three replicas with
// kill -9 and measures how long until a new leader serves: a Submit through
// storeclient.DialCluster (as a launcher's) succeeds, which the new leader
// commits to its log (and, for comparison, until a surviving replica says
// it leads, polled every 10 ms); and how long until that job (one `true` worker on a
// node whose agent lives) has succeeded, which needs the agents back with
// the new leader. Each replica is an `agent --listen --store-peers` process
// on loopback, with raft's default 1 s heartbeat; two more agents join
// with --store. After each trial the killed replica starts again on its own
// log and the next trial waits until every replica follows one leader
// again and every node is registered. MUSTER_FAILOVER_TRIALS sets the
// trials (20).
func BenchmarkFailover(b *testing.B) {
	trials := 20
	if s := os.Getenv("MUSTER_FAILOVER_TRIALS"); s != "" {
		var err error
		if trials, err = strconv.Atoi(s); err != nil || trials < 1 {
			b.Fatalf("MUSTER_FAILOVER_TRIALS: %q is not a number of trials", s)
		}
	}
	tmp := b.TempDir()
	bin := filepath.Join(tmp, "agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/agent").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	token := filepath.Join(tmp, "token")
	if err := os.WriteFile(token, []byte(scaleToken), 0o600); err != nil {
		b.Fatal(err)
	}
	addrs, lis := replicaAddrs(b, 3)
	for _, l := range lis {
		l.Close()
	}
	peers := strings.Join(addrs, ",")
	var replicas, all []*failoverAgent
	for i, addr := range addrs {
		dir := filepath.Join(tmp, fmt.Sprintf("replica-%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		a := &failoverAgent{name: fmt.Sprintf("replica-%d", i), dir: dir, args: []string{"--name", fmt.Sprintf("replica-%d", i),
			"--listen", addr, "--store-peers", peers, "--data-dir", filepath.Join(dir, "data"), "--token-file", token,
			"--socket", filepath.Join(dir, "agent.sock"), "--rank-logs", "none", "--kill-timeout", "2s"}}
		replicas = append(replicas, a)
	}
	for i := 0; i < 2; i++ {
		dir := filepath.Join(tmp, fmt.Sprintf("worker-%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		all = append(all, &failoverAgent{name: fmt.Sprintf("worker-%d", i), dir: dir, args: []string{"--name", fmt.Sprintf("worker-%d", i),
			"--store", peers, "--token-file", token, "--rank-logs", "none", "--kill-timeout", "2s"}})
	}
	all = append(replicas, all...)
	for _, a := range all {
		a.start(b, bin)
	}
	b.Cleanup(func() {
		if b.Failed() {
			for _, a := range all {
				b.Logf("agent %s, log's end:\n%s", a.name, a.logTail())
			}
		}
		for _, a := range all {
			a.stop()
		}
	})

	sec := security.Security{Token: scaleToken}
	direct := map[string]*storeclient.Client{}
	for _, addr := range addrs {
		c, err := storeclient.Dial(addr, sec)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		direct[addr] = c
	}
	cluster, err := storeclient.DialCluster(addrs[0], addrs, sec)
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()

	var elected, served, done []time.Duration
	var terms []string
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for t := 0; t < trials; t++ {
			leader := steady(b, direct, cluster, len(all), 90*time.Second)
			victim := replicas[slices.Index(addrs, leader)]
			// A quiet second: the replicas' heartbeats and the agents' renewals
			// run as they do between failures.
			time.Sleep(time.Second)
			killed := time.Now()
			victim.kill9()
			won := make(chan time.Duration, 1)
			go func() { won <- untilElected(direct, leader, killed, 30*time.Second) }()
			id := submitUntilServed(b, cluster, fmt.Sprintf("failover-%d-%d", it, t), 30*time.Second)
			served = append(served, time.Since(killed))
			elected = append(elected, <-won)
			if f := waitFinished(b, cluster, id, 60*time.Second); f.GetState() != musterv1.JobState_JOB_STATE_SUCCEEDED {
				b.Fatalf("trial %d: job %s: %v", t, id, f)
			}
			done = append(done, time.Since(killed))
			now := leaderOf(direct)
			terms = append(terms, fmt.Sprintf("%s->%s", strings.TrimPrefix(leader, "127.0.0.1:"), strings.TrimPrefix(now, "127.0.0.1:")))
			victim.start(b, bin)
		}
	}
	b.StopTimer()
	report := func(ds []time.Duration, name string) {
		s := slices.Clone(ds)
		slices.Sort(s)
		p50 := s[len(s)/2]
		if len(s)%2 == 0 {
			p50 = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
		b.ReportMetric(p50.Seconds(), name+"-p50-s")
		b.ReportMetric(s[len(s)-1].Seconds(), name+"-max-s")
	}
	report(elected, "elected")
	report(served, "served")
	report(done, "job-done")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d trials: until a replica says it leads %v; until a Submit is served %v; until its job succeeded %v; leaders %v",
		len(served), elected, served, done, terms)
}

// leaderOf is the address of the replica that says it leads, or "".
func leaderOf(direct map[string]*storeclient.Client) string {
	for addr, c := range direct {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.ReplicaStatus(ctx, &musterv1.ReplicaStatusRequest{})
		cancel()
		if err == nil && st.GetRole() == musterv1.ReplicaRole_REPLICA_ROLE_LEADER {
			return addr
		}
	}
	return ""
}

// untilElected polls the replicas other than old every 10 ms until one
// says it leads, and returns how long after since that was.
func untilElected(direct map[string]*storeclient.Client, old string, since time.Time, limit time.Duration) time.Duration {
	for time.Since(since) < limit {
		for addr, c := range direct {
			if addr == old {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			st, err := c.ReplicaStatus(ctx, &musterv1.ReplicaStatusRequest{})
			cancel()
			if err == nil && st.GetRole() == musterv1.ReplicaRole_REPLICA_ROLE_LEADER {
				return time.Since(since)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return limit
}

// steady waits until every replica answers, one leads and the others
// follow it, all at the same applied index, with every node registered
// and connected, and a Submit through the cluster succeeds; it returns
// the leader's address.
func steady(b *testing.B, direct map[string]*storeclient.Client, cluster *storeclient.Client, nodes int, limit time.Duration) string {
	b.Helper()
	why := ""
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		leader, applied := "", map[uint64]bool{}
		ok := true
		for addr, c := range direct {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := c.ReplicaStatus(ctx, &musterv1.ReplicaStatusRequest{})
			cancel()
			if err != nil {
				ok, why = false, fmt.Sprintf("replica %s: %v", addr, err)
				break
			}
			switch st.GetRole() {
			case musterv1.ReplicaRole_REPLICA_ROLE_LEADER:
				leader = addr
			case musterv1.ReplicaRole_REPLICA_ROLE_FOLLOWER:
			default:
				ok, why = false, fmt.Sprintf("replica %s is %v", addr, st.GetRole())
			}
			if st.GetLeaderAddr() == "" {
				ok, why = false, fmt.Sprintf("replica %s knows no leader", addr)
			}
			applied[st.GetAppliedIndex()] = true
		}
		if !ok {
			continue
		}
		if leader == "" || len(applied) != 1 {
			why = fmt.Sprintf("leader %q, applied indices %v", leader, applied)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := direct[leader].ListNodes(ctx, &musterv1.ListNodesRequest{})
		cancel()
		if err != nil {
			why = err.Error()
			continue
		}
		live := 0
		for _, n := range l.GetNodes() {
			if !n.GetNotRegistered() && !n.GetLeaving() {
				live++
			}
		}
		if live != nodes || len(l.GetNodes()) != nodes {
			why = fmt.Sprintf("%d nodes registered of %d listed, want %d", live, len(l.GetNodes()), nodes)
			continue
		}
		return leader
	}
	b.Fatalf("the replicas are not steady within %s: %s", limit, why)
	return ""
}

// submitUntilServed submits a job of one `true` worker on a node whose
// agent is not a replica's until the store takes it, each try bounded by
// a second, and returns its ID. The submission's name makes a try that was
// applied though its answer was lost the same job.
func submitUntilServed(b *testing.B, c *storeclient.Client, name string, limit time.Duration) string {
	b.Helper()
	spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 1, Nproc: 1, Hosts: []string{"worker-0", "worker-1"},
		WaitTimeoutMs: 60_000}
	var err error
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var resp *musterv1.SubmitResponse
		resp, err = c.Submit(ctx, &musterv1.SubmitRequest{Spec: spec, Submission: name})
		cancel()
		if err == nil {
			return resp.GetJobId()
		}
	}
	b.Fatalf("no replica took a Submit within %s after the leader's kill: %v", limit, err)
	return ""
}
