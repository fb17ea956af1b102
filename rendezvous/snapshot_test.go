package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
)

// testStoreID names every store of these tests: the replicas of one store
// share its ID.
const testStoreID = "st-snapshot"

// testClock moves only when the test moves it.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testLog is a replicated log with one replica, s: what s proposes while it
// leads is committed and applied at once. Without s it is the log of a
// replica that never leads: it takes no proposal.
type testLog struct{ s *Store }

func (l *testLog) Propose(c Command) (Result, error) {
	if l.s == nil || !l.s.Leading() {
		return Result{}, ErrNotLeader
	}
	return l.s.ApplyCommitted(c)
}

// Leads is asked under the store's lock: it must not take it.
func (l *testLog) Leads() bool { return l.s != nil }

// testStore is a store of these tests; StoreConfig.Refused fails the test.
func testStore(tb testing.TB, clock *testClock, edit func(*StoreConfig)) *Store {
	cfg := StoreConfig{Logger: zap.NewNop(), ID: testStoreID, Clock: clock.Now, SessionGrace: time.Hour,
		Refused: func(err error) { tb.Errorf("refused: %v", err) }}
	if edit != nil {
		edit(&cfg)
	}
	s := NewStore(cfg)
	tb.Cleanup(s.Close)
	return s
}

// followerStore is a replica that follows: it applies what its log commits.
func followerStore(tb testing.TB, clock *testClock) (*Store, *testLog) {
	log := &testLog{}
	return testStore(tb, clock, func(c *StoreConfig) { c.Log = log }), log
}

// fireDue fires, in a fixed order, every timer of s due by the clock: what
// the timers' own clocks would do, without waiting for them.
func fireDue(s *Store, clock *testClock) {
	for {
		s.mu.Lock()
		var due []FireTimer
		for _, tm := range s.timers {
			if !tm.cmd.Deadline.After(clock.Now()) {
				due = append(due, tm.cmd)
			}
		}
		s.mu.Unlock()
		if len(due) == 0 {
			return
		}
		slices.SortFunc(due, func(a, b FireTimer) int { return compareTimerKeys(keyOf(&a), keyOf(&b)) })
		for _, c := range due {
			s.fire(&c)
		}
	}
}

// takeCommands takes what s queued for a session's agent.
func takeCommands(tb testing.TB, s *Store, session string) []*musterv1.AgentCommand {
	tb.Helper()
	out, _, err := s.Commands(session)
	if err != nil {
		tb.Fatal(err)
	}
	return out.Take()
}

// scenario is a lone store that keeps every command it applies, encoded,
// driven as agents and launchers would drive it.
type scenario struct {
	tb       testing.TB
	s        *Store
	clock    *testClock
	mu       sync.Mutex
	log      [][]byte
	sessions map[string]string
	jobs     []string // in submission order
}

func newScenario(tb testing.TB) *scenario {
	sc := &scenario{tb: tb, clock: newTestClock(), sessions: map[string]string{}}
	sc.s = testStore(tb, sc.clock, func(c *StoreConfig) {
		c.Applied = func(c Command) {
			b, err := MarshalCommand(c)
			if err != nil {
				tb.Errorf("command %T: %v", c, err)
			}
			sc.mu.Lock()
			defer sc.mu.Unlock()
			sc.log = append(sc.log, b)
		}
	})
	return sc
}

func (sc *scenario) commands() [][]byte {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return slices.Clone(sc.log)
}

func (sc *scenario) check(err error) {
	sc.tb.Helper()
	if err != nil {
		sc.tb.Fatal(err)
	}
}

func (sc *scenario) register(name, addr string, gpus int32) {
	sc.tb.Helper()
	sc.clock.Add(time.Second)
	info := &musterv1.Node{Name: name, Addr: addr, Rank: -1}
	for i := range gpus {
		info.Gpus = append(info.Gpus, &musterv1.GPU{Index: i, Name: "H100"})
	}
	session, err := sc.s.Register(info, "key-"+name, nil, nil)
	sc.check(err)
	sc.sessions[name] = session
}

func (sc *scenario) submit(spec *musterv1.JobSpec) string {
	sc.tb.Helper()
	sc.clock.Add(time.Second)
	// As Submit does, whatever the form of its arguments.
	sc.check(validateSpec(spec))
	id := newID("j-")
	_, err := sc.s.Apply(&SubmitJob{JobID: id, Token: security.NewJobToken(id), Spec: spec, Owner: &musterv1.Identity{Uid: 1000, Gid: 1000}})
	sc.check(err)
	sc.jobs = append(sc.jobs, id)
	return id
}

// reserve answers the request for ports of job's round from node a, which
// is node rank 0 of every round here.
func (sc *scenario) reserve(job string) {
	sc.tb.Helper()
	sc.clock.Add(time.Second)
	var res *musterv1.ReservePorts
	for _, c := range takeCommands(sc.tb, sc.s, sc.sessions["a"]) {
		if r := c.GetReservePorts(); r != nil && r.GetJobId() == job {
			res = r
		}
	}
	if res == nil {
		sc.tb.Fatalf("job %s: node a was not asked for ports", job)
	}
	sc.check(sc.s.PortsReserved(sc.sessions["a"], res.GetRoundId(), []int32{29500, 29501}, ""))
}

func (sc *scenario) publish(node string, firstSeq uint64, evs ...*musterv1.JobEvent) {
	sc.tb.Helper()
	sc.clock.Add(time.Second)
	_, err := sc.s.Publish(sc.tb.Context(), sc.sessions[node], firstSeq, evs)
	sc.check(err)
}

func output(job string, rank int32, line string) *musterv1.JobEvent {
	return &musterv1.JobEvent{JobId: job, Event: &musterv1.JobEvent_Output{Output: &musterv1.Output{Rank: rank, Data: []byte(line)}}}
}

func testSpec(restarts int32, edit func(*musterv1.JobSpec)) *musterv1.JobSpec {
	spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("train")}, Nnodes: 2, Gpus: 1, Nproc: 1, MaxRestarts: restarts,
		KillTimeoutMs: 1000, WaitTimeoutMs: time.Hour.Milliseconds()}
	if edit != nil {
		edit(spec)
	}
	return spec
}

// runScenario drives a store through most of what its table holds: nodes
// that register, leave and are lost, a cordon, jobs that run, print,
// restart, are signalled, cancelled, time out and wait, health, stdin, a
// fence and its timers.
func runScenario(tb testing.TB) *scenario {
	sc := newScenario(tb)
	s := sc.s
	sc.register("a", "10.0.0.1", 4)
	sc.register("b", "10.0.0.2", 4)

	job1 := sc.submit(testSpec(1, func(spec *musterv1.JobSpec) { spec.StdinAll = true }))
	sc.reserve(job1)
	sc.publish("a", 1, output(job1, 0, "hello from rank 0\n"))
	sc.publish("b", 1, output(job1, 1, "hello from rank 1\n"))
	_, _, err := s.Signal(job1, int32(unix.SIGUSR1), 0)
	sc.check(err)
	sc.publish("b", 2, exited(job1, 1, 3)) // a restart
	sc.publish("a", 2, exited(job1, 0, 143))
	sc.reserve(job1)

	job2 := sc.submit(testSpec(0, func(spec *musterv1.JobSpec) { spec.TimeoutMs = time.Minute.Milliseconds() }))
	sc.reserve(job2)
	job3 := sc.submit(testSpec(0, nil))
	sc.clock.Add(time.Second)
	_, err = s.Cancel(job3, false, "cancelled by the test", 130)
	sc.check(err)
	job4 := sc.submit(testSpec(1, func(spec *musterv1.JobSpec) { spec.TimeoutMs = 2 * time.Hour.Milliseconds() }))
	sc.submit(testSpec(1, nil)) // job5
	sc.clock.Add(time.Second)
	sc.check(s.ReportHealth(sc.sessions["a"], job4, job4+"-r0", &musterv1.NodeHealth{Ok: true, Check: "nvidia-smi"}))

	sc.register("d", "10.0.0.4", 4)
	sc.clock.Add(time.Second)
	sc.check(s.Leave(sc.sessions["d"], "shutting down"))
	sc.clock.Add(time.Second)
	_, _, err = s.SetSchedule("a", musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED)
	sc.check(err)

	// job2's wall-clock limit.
	sc.clock.Add(time.Minute)
	fireDue(s, sc.clock)
	sc.publish("a", 3, exited(job2, 0, 143))
	sc.publish("b", 1, exited(job2, 1, 143))

	// b is lost: job1 has no restart left; job4 and job5, both reserving
	// ports, restart and wait out b's fence.
	sc.clock.Add(time.Second)
	_, err = s.Apply(&RemoveNode{Session: sc.sessions["b"], Loss: failure.Loss("b", musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, "", 0, ""),
		Renewed: sc.clock.Now().Add(-5 * time.Second)})
	sc.check(err)
	sc.publish("a", 1, exited(job1, 0, 143))
	sc.clock.Add(20 * time.Second)
	fireDue(s, sc.clock)

	// c comes: job4 and job5 form on a and c, in the order they wait.
	sc.register("c", "10.0.0.3", 4)
	sc.reserve(job4)
	sc.publish("a", 1, output(job4, 0, "round 1\n"))
	// job6 waits for a third node.
	sc.submit(testSpec(0, func(spec *musterv1.JobSpec) { spec.Nnodes = 3 }))
	sc.clock.Add(2 * time.Second)
	fireDue(s, sc.clock)
	return sc
}

// replay applies sc's commands, each through the codec, to a new follower.
func replay(tb testing.TB, clock *testClock, log [][]byte) (*Store, *testLog) {
	tb.Helper()
	s, l := followerStore(tb, clock)
	for i, b := range log {
		c, err := UnmarshalCommand(b)
		if err != nil {
			tb.Fatalf("command %d: %v", i, err)
		}
		if _, err := s.ApplyCommitted(c); err != nil {
			tb.Fatalf("command %d (%T): %v", i, c, err)
		}
	}
	return s, l
}

func snapshot(tb testing.TB, s *Store) []byte {
	tb.Helper()
	b, err := s.Snapshot()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// The table is its commands': two followers that apply a store's commands,
// as its log carries them, hold the table it holds, byte for byte.
func TestSnapshotOfReplayedTable(t *testing.T) {
	sc := runScenario(t)
	want := []musterv1.JobState{musterv1.JobState_JOB_STATE_FAILED, musterv1.JobState_JOB_STATE_CANCELLED,
		musterv1.JobState_JOB_STATE_CANCELLED, musterv1.JobState_JOB_STATE_RUNNING, musterv1.JobState_JOB_STATE_PENDING,
		musterv1.JobState_JOB_STATE_PENDING}
	for i, id := range sc.jobs {
		if got := sc.s.Job(id).GetState(); got != want[i] {
			t.Errorf("job %d (%s): %s, want %s", i+1, id, got, want[i])
		}
	}
	orig := snapshot(t, sc.s)
	log := sc.commands()
	for _, name := range []string{"first", "second"} {
		replica, _ := replay(t, newTestClock(), log)
		if got := snapshot(t, replica); !bytes.Equal(got, orig) {
			t.Errorf("%s replica's snapshot differs from the store's:\n%s", name, snapshotDiff(t, orig, got))
		}
	}
}

// snapshotDiff shows two snapshots decoded, where they first differ.
func snapshotDiff(t *testing.T, a, b []byte) string {
	ma, mb := &musterv1.StoreSnapshot{}, &musterv1.StoreSnapshot{}
	if err := proto.Unmarshal(a, ma); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, mb); err != nil {
		t.Fatal(err)
	}
	la, lb := strings.Split(ma.String(), " "), strings.Split(mb.String(), " ")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			lo, hi := max(i-20, 0), min(i+20, len(la), len(lb))
			return "want ... " + strings.Join(la[lo:hi], " ") + "\ngot  ... " + strings.Join(lb[lo:hi], " ")
		}
	}
	return "one snapshot is the other's beginning"
}

// A follower restored from a snapshot holds the same table, and once it
// leads it acts as the store the snapshot was taken of: the same listings,
// the same commands to a node whose agent registers again, the same end
// when a recorded timer fires.
func TestRestoreTakesOverTheTable(t *testing.T) {
	sc := runScenario(t)
	clock := sc.clock
	replayed, replayedLog := replay(t, clock, sc.commands())
	snap := snapshot(t, replayed)
	restored, restoredLog := followerStore(t, clock)
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, restored); !bytes.Equal(got, snap) {
		t.Fatalf("restored table's snapshot differs:\n%s", snapshotDiff(t, snap, got))
	}

	// The store that ran the scenario and the two replicas, once they lead.
	stores := []struct {
		name string
		s    *Store
	}{{"store", sc.s}, {"replayed", replayed}, {"restored", restored}}
	replayedLog.s, restoredLog.s = replayed, restored
	replayed.Lead()
	restored.Lead()
	for _, name := range []string{"a", "c", "d"} {
		takeCommands(t, sc.s, sc.sessions[name]) // sent already
	}
	same := func(step string) {
		t.Helper()
		wantJobs, wantNodes := sc.s.Jobs(), listNodes(sc.s)
		var wantCmds [][]*musterv1.AgentCommand
		for _, name := range []string{"a", "c", "d"} {
			wantCmds = append(wantCmds, takeCommands(t, sc.s, sc.sessions[name]))
		}
		for _, st := range stores[1:] {
			if got := st.s.Jobs(); !slices.EqualFunc(got, wantJobs, func(a, b *musterv1.JobStatus) bool { return proto.Equal(a, b) }) {
				t.Errorf("%s: %s lists the jobs\n%v\nwant\n%v", step, st.name, got, wantJobs)
			}
			if got := listNodes(st.s); !slices.EqualFunc(got, wantNodes, func(a, b *musterv1.NodeStatus) bool { return proto.Equal(a, b) }) {
				t.Errorf("%s: %s lists the nodes\n%v\nwant\n%v", step, st.name, got, wantNodes)
			}
			for i, name := range []string{"a", "c", "d"} {
				got := takeCommands(t, st.s, sc.sessions[name])
				if !slices.EqualFunc(got, wantCmds[i], func(a, b *musterv1.AgentCommand) bool { return proto.Equal(a, b) }) {
					t.Errorf("%s: %s sends node %s\n%v\nwant\n%v", step, st.name, name, got, wantCmds[i])
				}
			}
		}
	}
	same("leading")

	// a's agent registers again with its key, reporting job4, which runs:
	// job5's request for ports, which it does not report, is sent again.
	job4, job5, job6 := sc.jobs[3], sc.jobs[4], sc.jobs[5]
	var report []*musterv1.RunningJob
	func() {
		sc.s.mu.Lock()
		defer sc.s.mu.Unlock()
		j := sc.s.jobs[job4]
		report = append(report, &musterv1.RunningJob{JobId: j.id, RoundId: j.round.id, RoundNumber: j.round.number, JobToken: j.token,
			Spec: j.spec, NodeRank: 0, Nnodes: 2, Nproc: 1, WorldSize: 2, Gpus: j.round.gpus[0], StoreId: testStoreID, AckedSeq: 1})
	}()
	clock.Add(time.Second)
	for _, st := range stores {
		session, err := st.s.Register(&musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1,
			Gpus: []*musterv1.GPU{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}}}, "key-a", report, nil)
		if err != nil || session != sc.sessions["a"] {
			t.Fatalf("%s: a registers again: session %q, %v; want %q", st.name, session, err, sc.sessions["a"])
		}
	}
	out, _, err := restored.Commands(sc.sessions["a"])
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*musterv1.AgentCommand
	out.each(func(c *musterv1.AgentCommand) { cmds = append(cmds, c) })
	if len(cmds) != 1 || cmds[0].GetReservePorts().GetJobId() != job5 {
		t.Errorf("restored store sends a's agent %v, want job %s's request for ports", cmds, job5)
	}
	same("a registered again")

	// The timers recorded fire: job6 waited its hour, job4 ran its two.
	clock.Add(2 * time.Hour)
	for _, st := range stores {
		fireDue(st.s, clock)
	}
	if got := restored.Job(job6); got.GetState() != musterv1.JobState_JOB_STATE_FAILED || !strings.Contains(got.GetSummary(), "waited 1h0m0s") {
		t.Errorf("job6 restored: %s: %s; want failed, its wait over", got.GetState(), got.GetSummary())
	}
	if got := restored.Job(job4).GetState(); got != musterv1.JobState_JOB_STATE_STOPPING {
		t.Errorf("job4 restored: %s, want stopping at its time limit", got)
	}
	same("timers fired")
	if a, b := snapshot(t, replayed), snapshot(t, restored); !bytes.Equal(a, b) {
		t.Errorf("restored table differs from the replayed one:\n%s", snapshotDiff(t, a, b))
	}
}

// listNodes is the node list, each node's jobs and GPUs sorted.
func listNodes(s *Store) []*musterv1.NodeStatus {
	nodes := s.Nodes()
	for _, n := range nodes {
		slices.Sort(n.Jobs)
		slices.Sort(n.BusyGpus)
	}
	return nodes
}

// Restore refuses a snapshot it cannot take whole, saying what is wrong,
// and leaves the store's table as it was.
func TestRestoreRefuses(t *testing.T) {
	sc := runScenario(t)
	good := snapshot(t, sc.s)
	edit := func(fn func(m *musterv1.StoreSnapshot)) []byte {
		m := &musterv1.StoreSnapshot{}
		if err := proto.Unmarshal(good, m); err != nil {
			t.Fatal(err)
		}
		fn(m)
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"not a snapshot", []byte("\xff\xff\xff"), "store snapshot:"},
		{"no store ID", edit(func(m *musterv1.StoreSnapshot) { m.StoreId = "" }), "no store ID"},
		{"too many nodes", edit(func(m *musterv1.StoreSnapshot) {
			for range maxSnapshotNodes {
				m.Nodes = append(m.Nodes, m.Nodes[0])
			}
		}), "more than 40000"},
		{"a node twice", edit(func(m *musterv1.StoreSnapshot) { m.Nodes = append(m.Nodes, m.Nodes[0]) }), "registered twice"},
		{"a round naming no node", edit(func(m *musterv1.StoreSnapshot) { m.Jobs[3].Round.Nodes[1].Session = "s-nobody" }),
			`session "s-nobody": no such node`},
		{"event counters", edit(func(m *musterv1.StoreSnapshot) { m.Jobs[0].Events.Next++ }), "event log of versions"},
		{"event ends", edit(func(m *musterv1.StoreSnapshot) { m.Jobs[0].Events.Ends[0] = m.Jobs[0].Events.Total + 1 }),
			"ends are not in order"},
		{"no workers", edit(func(m *musterv1.StoreSnapshot) { m.Jobs[0].Round.Nproc = 0 }), "0 workers a node"},
		{"a rank outside the world", edit(func(m *musterv1.StoreSnapshot) { m.Jobs[3].Round.Exited = []int32{7} }),
			"rank 7 outside the world size 2"},
		{"a waiting job unknown", edit(func(m *musterv1.StoreSnapshot) { m.Waiting = append(m.Waiting, "j-nobody") }),
			`waiting job "j-nobody"`},
		{"a timer of no kind", edit(func(m *musterv1.StoreSnapshot) { m.Timers[0].Timer = 99 }), "timer kind 99"},
	}
	s, _ := followerStore(t, sc.clock)
	if err := s.Restore(good); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Restore(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Restore: %v, want an error saying %q", err, tt.want)
			}
			if got := snapshot(t, s); !bytes.Equal(got, good) {
				t.Errorf("a refused snapshot changed the table")
			}
		})
	}
	if err := sc.s.Restore(good); !errors.Is(err, ErrLeading) {
		t.Errorf("a lone store restores: %v, want %v", err, ErrLeading)
	}
}

// Restore never panics, and what it takes it writes down again as it took
// it.
func FuzzRestore(f *testing.F) {
	sc := runScenario(f)
	f.Add(snapshot(f, sc.s))
	f.Add([]byte{})
	clock := newTestClock()
	f.Fuzz(func(t *testing.T, b []byte) {
		s, _ := followerStore(t, clock)
		if err := s.Restore(b); err != nil {
			return
		}
		once := snapshot(t, s)
		again, _ := followerStore(t, clock)
		if err := again.Restore(once); err != nil {
			t.Fatalf("a snapshot of a restored table is refused: %v", err)
		}
		if twice := snapshot(t, again); !bytes.Equal(twice, once) {
			t.Fatalf("a restored table's snapshot changes when restored")
		}
	})
}

// groupLog replicates to every store of a group, led by the first: each
// command, as the log carries it, is applied by every store in one order.
type groupLog struct {
	mu     sync.Mutex
	stores []*Store
}

// memberLog is the group's log as one of its stores sees it.
type memberLog struct {
	group *groupLog
	leads bool
}

func (m memberLog) Propose(c Command) (Result, error) { return m.group.propose(c) }
func (m memberLog) Leads() bool                       { return m.leads }

func (g *groupLog) propose(c Command) (Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stores[0].Leading() {
		return Result{}, ErrNotLeader
	}
	b, err := MarshalCommand(c)
	if err != nil {
		return Result{}, err
	}
	var res Result
	for i := len(g.stores) - 1; i >= 0; i-- {
		c, err := UnmarshalCommand(b)
		if err != nil {
			return Result{}, err
		}
		// The leader's answer is the one its caller gets.
		res, err = g.stores[i].ApplyCommitted(c)
		if i == 0 {
			return res, err
		}
	}
	return res, nil
}

// The leader alone knows whether a launcher follows a job, but the job it
// stops when its launcher went away stops on every replica.
func TestLauncherGoneOnEveryReplica(t *testing.T) {
	clock := newTestClock()
	group := &groupLog{}
	fired := make(chan struct{}, 1)
	leader := testStore(t, clock, func(c *StoreConfig) { c.Log, c.DetachGrace = memberLog{group, true}, time.Millisecond })
	follower := testStore(t, clock, func(c *StoreConfig) {
		c.Log = memberLog{group, false}
		c.Applied = func(c Command) {
			if f, ok := c.(*FireTimer); ok && f.Timer == TimerLauncherGone {
				fired <- struct{}{}
			}
		}
	})
	group.stores = []*Store{leader, follower}
	leader.Lead()
	session, err := leader.Register(&musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1}, "key-a", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("train")}, Nnodes: 1, Nproc: 1, KillTimeoutMs: 1000}
	if err := validateSpec(spec); err != nil {
		t.Fatal(err)
	}
	job := newID("j-")
	if _, err := leader.Apply(&SubmitJob{JobID: job, Token: security.NewJobToken(job), Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if err := leader.PortsReserved(session, job+"-r0", []int32{29500, 29501}, ""); err != nil {
		t.Fatal(err)
	}

	// A launcher follows the job, then goes.
	ctx, cancel := context.WithCancel(t.Context())
	read := make(chan struct{}, 1)
	done := make(chan error)
	go func() {
		done <- leader.Follow(ctx, job, 0, true, func(*musterv1.JobEvent) error {
			select {
			case read <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	<-read
	cancel()
	<-done
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the launcher's timer did not fire")
	}
	for _, s := range group.stores {
		if got := s.Job(job); got.GetState() != musterv1.JobState_JOB_STATE_STOPPING {
			t.Errorf("job %s: %s, %q; want stopping, its launcher gone", job, got.GetState(), got.GetSummary())
		}
	}
	if a, b := snapshot(t, leader), snapshot(t, follower); !bytes.Equal(a, b) {
		t.Errorf("the follower's table differs from the leader's:\n%s", snapshotDiff(t, a, b))
	}
}
