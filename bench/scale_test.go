package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/stats"

	"github.com/musterhq/muster/agent"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeclient"
	"github.com/musterhq/muster/storeserver"
)

const scaleToken = "muster-bench-cluster-token"

// nodeCounts reads a comma-separated list of node counts from env, or def.
func nodeCounts(b *testing.B, env string, def []int) []int {
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("%s: %q is not a node count", env, f)
		}
		ns = append(ns, n)
	}
	return ns
}

// egress counts the bytes a gRPC server writes: every message's wire size.
type egress struct{ n atomic.Int64 }

func (e *egress) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (e *egress) HandleRPC(_ context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.OutPayload); ok {
		e.n.Add(int64(p.WireLength))
	}
}
func (e *egress) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (e *egress) HandleConn(context.Context, stats.ConnStats)                       {}

// lines runs the lightagents program and reads what it prints.
type lines struct {
	cmd *exec.Cmd
	c   chan string
}

func startLight(b *testing.B, bin string, args ...string) *lines {
	b.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	l := &lines{cmd: cmd, c: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.c <- sc.Text()
		}
		close(l.c)
	}()
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return l
}

// next waits for a line that starts with prefix and returns its fields.
func (l *lines) next(b *testing.B, prefix string, limit time.Duration) []string {
	b.Helper()
	t := time.After(limit)
	for {
		select {
		case s, ok := <-l.c:
			if !ok {
				b.Fatalf("lightagents ended while waiting for %q", prefix)
			}
			if f := strings.Fields(s); len(f) > 0 && f[0] == prefix {
				return f
			}
		case <-t:
			b.Fatalf("no %q from lightagents within %s", prefix, limit)
		}
	}
}

func (l *lines) stop() {
	l.cmd.Process.Kill()
	l.cmd.Wait()
}

func procStatus(key string) int64 {
	st, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// settle lets the previous round's traffic end and collects its garbage
// before a round is timed, for the store and its floor alike.
func settle() {
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
}

func roundsFor(n int) int {
	// Small rounds take a millisecond or two: more of them steady the median.
	switch {
	case n <= 100:
		return 31
	case n <= 1000:
		return 11
	default:
		return 5
	}
}

// BenchmarkScaleRound measures a round with N agents: from Submit until
// every agent holds its assignment. The agents are light (register, watch,
// answer ReservePorts and Stop; no workers) and run in another process over
// real gRPC, authenticated with the cluster token over TCP. The floor,
// measured in the same run with as many connections and streams, is a bare
// gRPC server that waits until N streams are open and sends each one
// message of the assignments' mean size. With MUSTER_SCALE_REPLICAS=3 the
// store is replicated on raft (scaleRoundReplicated), measured against a
// lone store and the floor in the same run.
func BenchmarkScaleRound(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "lightagents")
	if out, err := exec.Command("go", "build", "-o", bin, "./lightagents").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	conns := os.Getenv("MUSTER_SCALE_CONNS") // agents share this many connections; empty: one each
	if conns == "" {
		conns = "0"
	}
	// MUSTER_SCALE_REPLICAS=3 measures the store replicated on raft instead,
	// its rounds in turn with a lone store's and the floor's.
	replicas := 1
	if r := os.Getenv("MUSTER_SCALE_REPLICAS"); r != "" {
		var err error
		if replicas, err = strconv.Atoi(r); err != nil || replicas < 1 {
			b.Fatalf("MUSTER_SCALE_REPLICAS: %q is not a number of replicas", r)
		}
	}
	for _, n := range nodeCounts(b, "MUSTER_SCALE_NODES", []int{10, 100, 1000, 5000, 10000}) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if replicas > 1 {
					scaleRoundReplicated(b, bin, n, conns, replicas)
				} else {
					scaleRound(b, bin, n, conns)
				}
			}
		})
	}
}

func scaleRound(b *testing.B, bin string, n int, conns string) {
	rounds := roundsFor(n)
	limit := time.Duration(n/10+60) * time.Second
	eg := &egress{}
	srv, err := storeserver.Start(context.Background(), storeserver.Config{
		ListenAddr: "127.0.0.1:0", Security: security.Security{Token: scaleToken}, StatsHandler: eg})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c, err := storeclient.Dial(srv.Addr(), security.Security{Token: scaleToken})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// The store.
	regStart := time.Now()
	la := startLight(b, bin, "agents", "-addr", srv.Addr(), "-token", scaleToken, "-n", strconv.Itoa(n), "-conns", conns)
	la.next(b, "ready", limit)
	for {
		l, err := c.ListNodes(ctx, &musterv1.ListNodesRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if len(l.GetNodes()) == n {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	registered := time.Since(regStart)
	// The floor, with the same number of connections and streams, up at the
	// same time: its rounds alternate with the store's, so that the machine's
	// noise falls on both alike. Its messages have the size of the store's
	// assignments of a first, untimed round.
	resp, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: int32(n), Nproc: 1}})
	if err != nil {
		b.Fatal(err)
	}
	total, _ := strconv.ParseInt(la.next(b, "assigned", limit)[2], 10, 64)
	endJob(b, c, resp.GetJobId(), limit)
	size := total / int64(n)
	fl := startLight(b, bin, "floor", "-n", strconv.Itoa(n), "-size", strconv.FormatInt(size, 10))
	addr := fl.next(b, "listening", time.Minute)[1]
	fc, err := storeclient.Dial(addr, security.Security{Token: scaleToken})
	if err != nil {
		b.Fatal(err)
	}
	defer fc.Close()
	fla := startLight(b, bin, "agents", "-addr", addr, "-token", scaleToken, "-n", strconv.Itoa(n), "-conns", conns)
	fla.next(b, "ready", limit)

	var took, floor []time.Duration
	var bytes []int64
	var largest int64
	for r := 0; r < rounds; r++ {
		settle()
		before := eg.n.Load()
		start := time.Now()
		resp, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: int32(n), Nproc: 1}})
		if err != nil {
			b.Fatal(err)
		}
		f := la.next(b, "assigned", limit)
		took = append(took, time.Since(start))
		bytes = append(bytes, eg.n.Load()-before)
		big, _ := strconv.ParseInt(f[3], 10, 64)
		largest = max(largest, big)
		endJob(b, c, resp.GetJobId(), limit)

		settle()
		start = time.Now()
		if _, err := fc.Submit(ctx, &musterv1.SubmitRequest{}); err != nil {
			b.Fatal(err)
		}
		fla.next(b, "assigned", limit)
		floor = append(floor, time.Since(start))
	}
	rss, hwm := procStatus("VmRSS"), procStatus("VmHWM")
	fla.stop()
	fl.stop()
	la.stop()
	srv.Close()

	mt, mf := median(took), median(floor)
	slices.Sort(bytes)
	eb := bytes[len(bytes)/2]
	b.ReportMetric(mt.Seconds(), "round-s")
	b.ReportMetric(mf.Seconds(), "floor-s")
	b.ReportMetric(float64(mt)/float64(mf), "round/floor")
	b.ReportMetric(float64(eb), "egress-B")
	b.ReportMetric(float64(eb)/float64(n), "egress-B/node")
	b.ReportMetric(float64(largest), "largest-assignment-B")
	b.ReportMetric(float64(rss)/(1<<20), "store-RSS-MiB")
	b.ReportMetric(float64(hwm)/(1<<20), "store-peak-MiB")
	b.ReportMetric(registered.Seconds(), "register-s")
	b.ReportMetric(0, "ns/op")
	b.Logf("| %d | %.3f s | %.3f s | %.2f | %d B (%d B/node; assignments %d B, largest %d B) | %.0f MiB (peak %.0f MiB) | rounds %v floor %v",
		n, mt.Seconds(), mf.Seconds(), float64(mt)/float64(mf), eb, eb/int64(n), size, largest, float64(rss)/(1<<20), float64(hwm)/(1<<20), took, floor)
}

// endJob cancels a job, which sends one Stop to each node, whose light agent
// reports its worker stopped, and waits for the job's end.
func endJob(b *testing.B, c *storeclient.Client, job string, limit time.Duration) {
	b.Helper()
	if _, err := c.Cancel(context.Background(), &musterv1.CancelRequest{JobId: job, Force: true}); err != nil {
		b.Fatal(err)
	}
	waitFinished(b, c, job, limit)
}

func waitFinished(b *testing.B, c *storeclient.Client, job string, limit time.Duration) *musterv1.JobFinished {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	w, err := c.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: job})
	if err != nil {
		b.Fatal(err)
	}
	for {
		ev, err := w.Recv()
		if err == io.EOF {
			b.Fatalf("job %s: events ended before it finished", job)
		}
		if err != nil {
			b.Fatalf("job %s: %v", job, err)
		}
		if f := ev.GetFinished(); f != nil {
			return f
		}
	}
}

// BenchmarkScaleJob runs a job of one `true` worker on each of N real
// agents, in this process (each with its own gRPC connection to the store
// and its own loopback address), from Submit until the job's final event.
// The floor is N `true` processes started at once from one process, without
// muster, in the same run.
func BenchmarkScaleJob(b *testing.B) {
	for _, n := range nodeCounts(b, "MUSTER_SCALE_JOB_NODES", []int{10, 100, 1000}) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				scaleJob(b, n)
			}
		})
	}
}

func scaleJob(b *testing.B, n int) {
	ctx := context.Background()
	sec := security.Security{Token: scaleToken}
	srv, err := storeserver.Start(ctx, storeserver.Config{ListenAddr: "127.0.0.1:0", Security: sec})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	tmp := b.TempDir()
	agents := make([]*agent.Agent, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range agents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			// Each node has a directory of its own, as separate machines do.
			dir := filepath.Join(tmp, strconv.Itoa(i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				errs <- err
				return
			}
			a, err := agent.Start(ctx, agent.Config{StoreAddr: srv.Addr(), Security: sec,
				Name: fmt.Sprintf("node-%05d", i), Addr: fmt.Sprintf("127.1.%d.%d", i>>8, i&255),
				Rank: -1, Environ: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, TempDir: dir})
			if err != nil {
				errs <- err
				return
			}
			agents[i] = a
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	defer func() {
		for _, a := range agents {
			a.Close(0)
		}
	}()
	c, err := storeclient.Dial(srv.Addr(), sec)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rounds := 3
	var took, floor []time.Duration
	for r := 0; r < rounds; r++ {
		start := time.Now()
		resp, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: int32(n), Nproc: 1}})
		if err != nil {
			b.Fatal(err)
		}
		if f := waitFinished(b, c, resp.GetJobId(), 5*time.Minute); f.GetState() != musterv1.JobState_JOB_STATE_SUCCEEDED {
			b.Fatalf("job %s: %v", resp.GetJobId(), f)
		}
		took = append(took, time.Since(start))

		start = time.Now()
		var fw sync.WaitGroup
		for i := 0; i < n; i++ {
			fw.Add(1)
			go func() {
				defer fw.Done()
				if err := exec.Command("true").Run(); err != nil {
					b.Error(err)
				}
			}()
		}
		fw.Wait()
		floor = append(floor, time.Since(start))
	}
	mt, mf := median(took), median(floor)
	b.ReportMetric(mt.Seconds(), "job-s")
	b.ReportMetric(mf.Seconds(), "spawn-floor-s")
	b.ReportMetric(float64(mt)/float64(mf), "job/floor")
	b.ReportMetric(float64(procStatus("VmHWM"))/(1<<20), "process-peak-MiB")
	b.ReportMetric(0, "ns/op")
	b.Logf("| %d | %.3f s | %.3f s | %.2f | jobs %v spawn %v", n, mt.Seconds(), mf.Seconds(), float64(mt)/float64(mf), took, floor)
}

// replicaAddrs returns n loopback store addresses whose next ports (raft's)
// are free too, and a listener on each store address, to serve it on.
func replicaAddrs(b testing.TB, n int) ([]string, []net.Listener) {
	b.Helper()
	var addrs []string
	var lis, spare []net.Listener
	defer func() {
		for _, l := range spare {
			l.Close()
		}
	}()
	for len(addrs) < n {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		p := a.Addr().(*net.TCPAddr).Port
		r, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		if err != nil {
			spare = append(spare, a)
			continue
		}
		// Raft binds it itself: it is only held while the others are found.
		spare = append(spare, r)
		addrs, lis = append(addrs, a.Addr().String()), append(lis, a)
	}
	return addrs, lis
}

// startReplicated starts n replicas of a store on loopback in this process,
// each with its raft log (bbolt) in a directory of its own and raft's
// default heartbeat, and waits until one leads: it returns the servers and
// the leader's index. edit may change each one's configuration first.
func startReplicated(b testing.TB, n int, edit func(i int, cfg *storeserver.Config)) ([]*storeserver.Server, int) {
	b.Helper()
	addrs, lis := replicaAddrs(b, n)
	srvs := make([]*storeserver.Server, n)
	for i := range srvs {
		cfg := storeserver.Config{Listener: lis[i], AdvertiseAddr: addrs[i], Security: security.Security{Token: scaleToken},
			Replicas: addrs, ReplicaDir: b.TempDir()}
		if edit != nil {
			edit(i, &cfg)
		}
		s, err := storeserver.Start(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		srvs[i] = s
		b.Cleanup(s.Close)
	}
	return srvs, leaderIndex(b, srvs, 30*time.Second)
}

// leaderIndex waits until one of srvs leads its store.
func leaderIndex(b testing.TB, srvs []*storeserver.Server, limit time.Duration) int {
	b.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for i, s := range srvs {
			if s.Store().Leading() {
				return i
			}
		}
	}
	b.Fatalf("no store replica leads within %s", limit)
	return -1
}

// roundTarget is a store measured in turn with another: its client, its
// light agents and the bytes its gRPC server writes.
type roundTarget struct {
	c          *storeclient.Client
	la         *lines
	eg         *egress
	registered time.Duration
	took       []time.Duration
	bytes      []int64
	size       int64 // the assignments' mean size in a first, untimed round
}

// register starts n light agents against addr and waits until the store
// lists them all.
func (t *roundTarget) register(b *testing.B, bin, addr string, n int, conns string, limit time.Duration) {
	start := time.Now()
	t.la = startLight(b, bin, "agents", "-addr", addr, "-token", scaleToken, "-n", strconv.Itoa(n), "-conns", conns)
	t.la.next(b, "ready", limit)
	for {
		l, err := t.c.ListNodes(context.Background(), &musterv1.ListNodesRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if len(l.GetNodes()) == n {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.registered = time.Since(start)
}

// round times one round from Submit until every agent holds its
// assignment, then ends the job.
func (t *roundTarget) round(b *testing.B, n int, limit time.Duration, timed bool) {
	settle()
	before := t.eg.n.Load()
	start := time.Now()
	resp, err := t.c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: int32(n), Nproc: 1}})
	if err != nil {
		b.Fatal(err)
	}
	f := t.la.next(b, "assigned", limit)
	took, sent := time.Since(start), t.eg.n.Load()-before
	if timed {
		t.took, t.bytes = append(t.took, took), append(t.bytes, sent)
	} else {
		total, _ := strconv.ParseInt(f[2], 10, 64)
		t.size = total / int64(n)
	}
	endJob(b, t.c, resp.GetJobId(), limit)
}

// scaleRoundReplicated is scaleRound for a store of replicas replicas on
// raft (in this process, on loopback), measured in the same run as a lone
// store and the floor, each with its own N light agents: their rounds come
// in turn, the replicated store's and the lone store's first on alternate
// rounds, the floor's last.
func scaleRoundReplicated(b *testing.B, bin string, n int, conns string, replicas int) {
	rounds := roundsFor(n)
	limit := time.Duration(n/10+60) * time.Second
	sec := security.Security{Token: scaleToken}
	ctx := context.Background()

	lone := &roundTarget{eg: &egress{}}
	srv, err := storeserver.Start(ctx, storeserver.Config{ListenAddr: "127.0.0.1:0", Security: sec, StatsHandler: lone.eg})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if lone.c, err = storeclient.Dial(srv.Addr(), sec); err != nil {
		b.Fatal(err)
	}
	defer lone.c.Close()

	egs := make([]*egress, replicas)
	srvs, lead := startReplicated(b, replicas, func(i int, cfg *storeserver.Config) {
		egs[i] = &egress{}
		cfg.StatsHandler = egs[i]
	})
	var addrs []string
	for _, s := range srvs {
		addrs = append(addrs, s.AdvertiseAddr())
		defer s.Close()
	}
	rep := &roundTarget{eg: egs[lead]}
	// The agents dial the leader, as they would once they found it.
	if rep.c, err = storeclient.DialCluster(srvs[lead].Addr(), addrs, sec); err != nil {
		b.Fatal(err)
	}
	defer rep.c.Close()

	lone.register(b, bin, srv.Addr(), n, conns, limit)
	rep.register(b, bin, srvs[lead].Addr(), n, conns, limit)
	lone.round(b, n, limit, false)
	rep.round(b, n, limit, false)

	fl := startLight(b, bin, "floor", "-n", strconv.Itoa(n), "-size", strconv.FormatInt(lone.size, 10))
	addr := fl.next(b, "listening", time.Minute)[1]
	fc, err := storeclient.Dial(addr, sec)
	if err != nil {
		b.Fatal(err)
	}
	defer fc.Close()
	fla := startLight(b, bin, "agents", "-addr", addr, "-token", scaleToken, "-n", strconv.Itoa(n), "-conns", conns)
	fla.next(b, "ready", limit)

	var floor []time.Duration
	for r := 0; r < rounds; r++ {
		first, second := rep, lone
		if r%2 == 1 {
			first, second = lone, rep
		}
		first.round(b, n, limit, true)
		second.round(b, n, limit, true)
		settle()
		start := time.Now()
		if _, err := fc.Submit(ctx, &musterv1.SubmitRequest{}); err != nil {
			b.Fatal(err)
		}
		fla.next(b, "assigned", limit)
		floor = append(floor, time.Since(start))
	}
	if !srvs[lead].Store().Leading() {
		b.Fatal("the leader changed during the rounds: a round may have waited for an election")
	}
	hwm := procStatus("VmHWM")
	fla.stop()
	fl.stop()
	lone.la.stop()
	rep.la.stop()

	mr, ml, mf := median(rep.took), median(lone.took), median(floor)
	slices.Sort(rep.bytes)
	eb := rep.bytes[len(rep.bytes)/2]
	b.ReportMetric(mr.Seconds(), "round-s")
	b.ReportMetric(ml.Seconds(), "single-s")
	b.ReportMetric(mf.Seconds(), "floor-s")
	b.ReportMetric(float64(mr)/float64(ml), "replicated/single")
	b.ReportMetric(float64(mr)/float64(mf), "round/floor")
	b.ReportMetric(float64(ml)/float64(mf), "single/floor")
	b.ReportMetric(float64(eb)/float64(n), "egress-B/node")
	b.ReportMetric(rep.registered.Seconds(), "register-s")
	b.ReportMetric(lone.registered.Seconds(), "single-register-s")
	b.ReportMetric(float64(hwm)/(1<<20), "process-peak-MiB")
	b.ReportMetric(0, "ns/op")
	b.Logf("| %d | %.4f s | %.4f s | %.4f s | %.2f | %.2f | %.2f | register %.2f s / %.2f s | replicated %v single %v floor %v",
		n, mr.Seconds(), ml.Seconds(), mf.Seconds(), float64(mr)/float64(ml), float64(mr)/float64(mf), float64(ml)/float64(mf),
		rep.registered.Seconds(), lone.registered.Seconds(), rep.took, lone.took, floor)
}
