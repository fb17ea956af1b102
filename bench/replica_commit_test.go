package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/replica"
	"github.com/musterhq/muster/security"
)

// commitJobs is how many small jobs each iteration of BenchmarkReplicaCommit
// runs on each store; commitRegisters how many nodes it registers.
// commitIdle registers after a pause of commitIdlePause each, as a round's
// commands come after the agents' quiet.
const (
	commitJobs      = 50
	commitRegisters = 100
	commitIdle      = 20
	commitIdlePause = 200 * time.Millisecond
)

// commitReplica is one replica of the benchmark's store: a rendezvous
// store on a replica.Replica, as storeserver builds them.
type commitReplica struct {
	rep   *replica.Replica
	store *rendezvous.Store
	db    string // its raft log
}

// appliedLog keeps the commands a store applied while on.
type appliedLog struct {
	mu   sync.Mutex
	on   bool
	cmds []rendezvous.Command
}

func (l *appliedLog) hook(c rendezvous.Command) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.cmds = append(l.cmds, c)
	}
}

func (l *appliedLog) record(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = on
}

// BenchmarkReplicaCommit measures what the raft log adds to a store's
// commands, on the leader of three replicas against a lone store, in turn:
// the latency of Register (one RegisterNode command) back to back, and
// again after 200 ms of quiet each (idle-register: a round's commands come
// after the agents' quiet); the latency of a small job (two nodes, one
// worker each: Submit until both workers' exits are applied); and the bytes
// a job adds to the log, of the first iteration's jobs: the bytes of
// MarshalCommand of the commands the leader applied (the raft entries'
// data), the raft log's entries in the leader's bbolt file (keys and
// msgpack-encoded raft.Log values, read after the replicas closed), and
// the file's growth, which bbolt makes in doublings.
//
// The replicas run in this process on loopback, raft's heartbeat at its 1 s
// default, each log in its own directory under the benchmark's temporary
// directory: every commit is a bbolt transaction (fsync) on the leader and
// on a follower.
func BenchmarkReplicaCommit(b *testing.B) {
	addrs, lis := replicaAddrs(b, 3)
	for _, l := range lis {
		l.Close() // no gRPC here: only raft's ports are used
	}
	logs := make([]*appliedLog, len(addrs))
	rs := make([]*commitReplica, len(addrs))
	for i, a := range addrs {
		dir := b.TempDir()
		rep, err := replica.New(replica.Config{Addr: a, Peers: addrs, DataDir: dir, Security: security.Security{Token: scaleToken}})
		if err != nil {
			b.Fatal(err)
		}
		logs[i] = &appliedLog{}
		store := rendezvous.NewStore(rendezvous.StoreConfig{Addr: a, Log: rep, ID: rep.StoreID(), SessionGrace: time.Hour, Applied: logs[i].hook})
		if err := rep.Start(store); err != nil {
			b.Fatal(err)
		}
		// Package replica keeps its log in DataDir/raft/raft.db.
		rs[i] = &commitReplica{rep: rep, store: store, db: filepath.Join(dir, "raft", "raft.db")}
		b.Cleanup(func() { rep.Close(); store.Close() })
	}
	var lead *commitReplica
	var leadLog *appliedLog
	for deadline := time.Now().Add(30 * time.Second); lead == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("no replica leads")
		}
		for i, r := range rs {
			if r.store.Leading() {
				lead, leadLog = r, logs[i]
			}
		}
	}
	loneLog := &appliedLog{}
	lone := rendezvous.NewStore(rendezvous.StoreConfig{Addr: "127.0.0.1:1", SessionGrace: time.Hour, Applied: loneLog.hook})
	defer lone.Close()

	// Two simulated agents on each store, for the jobs.
	loneAgents := simAgents(b, lone, "lone")
	repAgents := simAgents(b, lead.store, "rep")

	var regRep, regLone, idleRep, idleLone, jobRep, jobLone []time.Duration
	before := raftFileSize(lead.db)
	firstIndex := lead.rep.Status("").GetAppliedIndex()
	var lastIndex uint64
	var after int64
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for k := 0; k < commitRegisters; k++ {
			name := fmt.Sprintf("reg-%d-%d", it, k)
			info := func() *musterv1.Node { return &musterv1.Node{Name: name, Addr: "10.1.0.1", Rank: -1} }
			regLone = append(regLone, timeCall(b, func() error { _, err := lone.Register(info(), "key-"+name, nil, nil); return err }))
			regRep = append(regRep, timeCall(b, func() error { _, err := lead.store.Register(info(), "key-"+name, nil, nil); return err }))
		}
		for k := 0; k < commitIdle; k++ {
			name := fmt.Sprintf("idle-%d-%d", it, k)
			info := func() *musterv1.Node { return &musterv1.Node{Name: name, Addr: "10.1.0.1", Rank: -1} }
			time.Sleep(commitIdlePause)
			idleLone = append(idleLone, timeCall(b, func() error { _, err := lone.Register(info(), "key-"+name, nil, nil); return err }))
			time.Sleep(commitIdlePause)
			idleRep = append(idleRep, timeCall(b, func() error { _, err := lead.store.Register(info(), "key-"+name, nil, nil); return err }))
		}
		if it == 0 {
			// Only jobs count towards the log's bytes.
			firstIndex = lead.rep.Status("").GetAppliedIndex()
			before = raftFileSize(lead.db)
			leadLog.record(true)
			loneLog.record(true)
		}
		for k := 0; k < commitJobs; k++ {
			jobRep = append(jobRep, runSimJob(b, lead.store, repAgents))
			jobLone = append(jobLone, runSimJob(b, lone, loneAgents))
		}
		if it == 0 {
			leadLog.record(false)
			loneLog.record(false)
			// The job's last timers are proposed after its end: let them land.
			time.Sleep(200 * time.Millisecond)
			lastIndex = lead.rep.Status("").GetAppliedIndex()
			after = raftFileSize(lead.db)
		}
	}
	b.StopTimer()
	if !lead.store.Leading() {
		b.Fatal("the leader changed during the benchmark")
	}

	// The commands of the first iteration's jobs, as the log carries them.
	cmdBytes, kinds := 0, map[string]int{}
	leadLog.mu.Lock()
	for _, c := range leadLog.cmds {
		bs, err := rendezvous.MarshalCommand(c)
		if err != nil {
			b.Fatal(err)
		}
		cmdBytes += len(bs)
		kinds[strings.TrimPrefix(fmt.Sprintf("%T", c), "*rendezvous.")]++
	}
	nCmds := len(leadLog.cmds)
	leadLog.mu.Unlock()
	loneLog.mu.Lock()
	nLone := len(loneLog.cmds)
	loneLog.mu.Unlock()
	for _, r := range rs {
		r.rep.Close()
	}
	entries, entryBytes := raftLogBytes(b, lead.db, firstIndex, lastIndex)

	report := func(ds []time.Duration, name string) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		p50, p99 := s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
		b.ReportMetric(float64(p50.Microseconds()), name+"-p50-us")
		b.ReportMetric(float64(p99.Microseconds()), name+"-p99-us")
		return p50
	}
	rr, rl := report(regRep, "register"), report(regLone, "lone-register")
	report(idleRep, "idle-register")
	report(idleLone, "lone-idle-register")
	jr, jl := report(jobRep, "job"), report(jobLone, "lone-job")
	b.ReportMetric(float64(rr)/float64(rl), "register-replicated/lone")
	b.ReportMetric(float64(jr)/float64(jl), "job-replicated/lone")
	b.ReportMetric(float64(nCmds)/commitJobs, "commands/job")
	b.ReportMetric(float64(cmdBytes)/commitJobs, "command-B/job")
	b.ReportMetric(float64(entryBytes)/commitJobs, "raft-log-B/job")
	b.ReportMetric(float64(after-before)/commitJobs, "raft.db-growth-B/job")
	b.ReportMetric(0, "ns/op")
	var ks []string
	for k, v := range kinds {
		ks = append(ks, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(ks)
	b.Logf("%d jobs: %d commands on the leader (%d on the lone store): %s; %d B of commands, %d raft entries of %d B (indices %d-%d); raft.db %d -> %d B",
		commitJobs, nCmds, nLone, strings.Join(ks, ", "), cmdBytes, entries, entryBytes, firstIndex+1, lastIndex, before, after)
}

func raftFileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// raftLogBytes sums the keys and values of the raft log's entries from
// first+1 to last in the bbolt file at path.
func raftLogBytes(b *testing.B, path string, first, last uint64) (n int, bytes int) {
	b.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		bk := tx.Bucket([]byte("logs"))
		if bk == nil {
			return fmt.Errorf("no logs bucket in %s", path)
		}
		return bk.ForEach(func(k, v []byte) error {
			if len(k) == 8 {
				idx := uint64(k[0])<<56 | uint64(k[1])<<48 | uint64(k[2])<<40 | uint64(k[3])<<32 | uint64(k[4])<<24 | uint64(k[5])<<16 | uint64(k[6])<<8 | uint64(k[7])
				if idx > first && idx <= last {
					n++
					bytes += len(k) + len(v)
				}
			}
			return nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return n, bytes
}

func timeCall(b *testing.B, f func() error) time.Duration {
	b.Helper()
	start := time.Now()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// simAgent plays an agent inside the benchmark's process, on the store's
// own API: it answers ReservePorts, and a Start by publishing its worker
// started, then exited with 0, as a real agent's publisher does.
type simAgent struct {
	store   *rendezvous.Store
	name    string
	session string
	done    chan string // the jobs whose worker's exit was applied
}

func simAgents(b *testing.B, store *rendezvous.Store, prefix string) []*simAgent {
	b.Helper()
	var as []*simAgent
	for i := 0; i < 2; i++ {
		a := &simAgent{store: store, name: fmt.Sprintf("%s-%d", prefix, i), done: make(chan string, 16)}
		var err error
		if a.session, err = store.Register(&musterv1.Node{Name: a.name, Addr: fmt.Sprintf("10.2.0.%d", i+1), Rank: -1}, "key-"+a.name, nil, nil); err != nil {
			b.Fatal(err)
		}
		out, gone, err := store.Commands(a.session)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		go func() {
			for {
				for _, cmd := range out.Take() {
					a.handle(ctx, cmd)
				}
				select {
				case <-out.Wake():
				case <-gone:
					return
				case <-ctx.Done():
					return
				}
			}
		}()
		as = append(as, a)
	}
	return as
}

func (a *simAgent) handle(ctx context.Context, cmd *musterv1.AgentCommand) {
	switch c := cmd.GetCommand().(type) {
	case *musterv1.AgentCommand_ReservePorts:
		if err := a.store.PortsReserved(a.session, c.ReservePorts.GetRoundId(), []int32{29500, 29501}, ""); err != nil {
			panic(err)
		}
	case *musterv1.AgentCommand_Start:
		asg := c.Start
		rank := asg.GetNodeRank() * asg.GetNproc()
		job := asg.GetJobId()
		if _, err := a.store.Publish(ctx, a.session, 1, []*musterv1.JobEvent{{JobId: job, Event: &musterv1.JobEvent_Started{
			Started: &musterv1.WorkerStarted{Rank: rank, Node: a.name, Pid: 4242}}}}); err != nil {
			panic(err)
		}
		if _, err := a.store.Publish(ctx, a.session, 2, []*musterv1.JobEvent{{JobId: job, Event: &musterv1.JobEvent_Exited{
			Exited: &musterv1.WorkerExited{Rank: rank, Node: a.name}}}}); err != nil {
			panic(err)
		}
		a.done <- job
	}
}

// runSimJob runs a job of one worker on each of the two agents, from Submit
// until both exits are applied and the job has succeeded.
func runSimJob(b *testing.B, store *rendezvous.Store, agents []*simAgent) time.Duration {
	b.Helper()
	start := time.Now()
	// On the agents' nodes: the nodes registered for Register's latency have none.
	id, err := store.Submit(&musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 2, Nproc: 1,
		Hosts: []string{agents[0].name, agents[1].name}}, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range agents {
		select {
		case got := <-a.done:
			if got != id {
				b.Fatalf("agent %s finished job %s, want %s", a.name, got, id)
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("job %s: agent %s never finished its worker: %v", id, a.name, store.Job(id))
		}
	}
	took := time.Since(start)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st := store.Job(id).GetState()
		if st == musterv1.JobState_JOB_STATE_SUCCEEDED {
			break
		}
		if st.Ended() || time.Now().After(deadline) {
			b.Fatalf("job %s: %v, want succeeded", id, st)
		}
	}
	return took
}
