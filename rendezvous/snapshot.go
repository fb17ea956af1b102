package rendezvous

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Snapshots. The replicated log is cut short by snapshots of the job table:
// Snapshot writes the table down as musterv1.StoreSnapshot, the same bytes
// for the same table, and Restore replaces a follower's table with one so
// written. The table is what applying commands makes: nodes, jobs, their
// rounds and event logs, the timers set, cordons, departures. Pointers are
// written as names (a node's session, a job's ID, a timer's FireTimer
// fields) and made pointers again on restore.
//
// What is not written, and why (the rest of Store, node, job, round,
// hangInquiry, eventLog, StdinRelay, placement, departure and outcome is):
//   - Store.cfg, log, clock, at, mu: the replica's make-up, not its table.
//   - Store.kv: soft, as for a restarted store (the roster key too).
//   - Store.began, leading, deposed, closed, done, jobsChanged: the replica's life.
//   - Store.liveness, recheck, alone, rejoined: gossip's word, the leader's doubts.
//   - Store.rounds, byName, job.place's lists: rebuilt from the jobs, nodes, specs.
//   - node.out, gone, connected, lost: the leader's session; Lead awaits agents.
//   - node.suspect, probed, probers: the leader's suspicions and probes.
//   - job.attached, eventLog.followers, nextID, awaiting, wake, room: followers.
//   - eventLog.maxBytes, maxCount: this replica's bounds.
//   - StdinRelay's chunks, eof, writer, readers' progress: stdin in flight.
//   - jobTimer.t: armed where the store leads; Lead arms every recorded timer.

// Bounds on what a snapshot may hold: it comes over the network.
const (
	maxSnapshotNodes  = 4 * jobspec.MaxNodes // registered, and again retired
	maxSnapshotJobs   = 100_000
	maxSnapshotTimers = 16 * maxSnapshotJobs
	maxSnapshotEvents = 1 << 24 // every job's together
	maxSnapshotNames  = 1 << 20 // cordons, departures, forgotten jobs each
	maxSnapshotWorld  = jobspec.MaxNodes * jobspec.MaxNProc
	maxSnapshotSigs   = 256
)

// ErrLeading is a Restore asked of a store that leads: only a follower's
// table is replaced.
var ErrLeading = errors.New("the store leads: only a follower restores a snapshot")

// Snapshot writes the store's job table down: the same table gives the
// same bytes, wherever it was made.
func (s *Store) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &musterv1.StoreSnapshot{StoreId: s.id}
	for _, session := range slices.Sorted(maps.Keys(s.nodes)) {
		m.Nodes = append(m.Nodes, nodeRecord(s.nodes[session]))
	}
	// Nodes removed from the store that its jobs still name are written
	// once each, apart from the registered ones.
	retired := map[string]*node{}
	ref := func(n *node) (string, error) {
		if n.placeholder {
			return "", fmt.Errorf("node %s: a placeholder named outside its round", n.info.GetName())
		}
		if reg := s.nodes[n.session]; reg == n {
			return n.session, nil
		} else if reg != nil {
			return "", fmt.Errorf("session %s: two nodes", n.session)
		}
		if old := retired[n.session]; old != nil && old != n {
			return "", fmt.Errorf("session %s: two removed nodes", n.session)
		}
		retired[n.session] = n
		return n.session, nil
	}
	for _, id := range s.order {
		jm, err := s.jobRecordLocked(s.jobs[id], ref)
		if err != nil {
			return nil, fmt.Errorf("store snapshot: job %s: %w", id, err)
		}
		m.Jobs = append(m.Jobs, jm)
	}
	for _, session := range slices.Sorted(maps.Keys(retired)) {
		m.RetiredNodes = append(m.RetiredNodes, nodeRecord(retired[session]))
	}
	keys := slices.SortedFunc(maps.Keys(s.timers), compareTimerKeys)
	for _, k := range keys {
		m.Timers = append(m.Timers, timerRecord(s.timers[k]))
	}
	for _, name := range slices.Sorted(maps.Keys(s.schedule)) {
		m.Schedules = append(m.Schedules, &musterv1.SnapshotSchedule{Node: name, Schedule: s.schedule[name]})
	}
	for _, name := range slices.Sorted(maps.Keys(s.departed)) {
		d := s.departed[name]
		m.Departed = append(m.Departed, &musterv1.SnapshotDeparture{Node: name, SinceUnixNs: unixNs(d.since), AgentLeft: d.agentLeft})
	}
	for _, j := range s.waiting {
		m.Waiting = append(m.Waiting, j.id)
	}
	m.Forgotten = slices.Sorted(maps.Keys(s.forgotten))
	// Marshalled under the lock: the table's messages are shared with it.
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

func compareTimerKeys(a, b timerKey) int {
	return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.round, b.round), cmp.Compare(a.timer, b.timer),
		cmp.Compare(a.deadline, b.deadline))
}

func nodeRecord(n *node) *musterv1.SnapshotNode {
	m := &musterv1.SnapshotNode{Session: n.session, Info: n.info, Key: n.key, Jobs: slices.Sorted(maps.Keys(n.jobs)),
		Leaving: n.leaving, Health: n.health, Placeholder: n.placeholder, RenewedUnixNs: unixNs(n.renewed)}
	for _, g := range slices.Sorted(maps.Keys(n.busy)) {
		m.Busy = append(m.Busy, &musterv1.SnapshotBusyGpu{Index: g, JobId: n.busy[g]})
	}
	for _, id := range slices.Sorted(maps.Keys(n.seqs)) {
		m.Seqs = append(m.Seqs, &musterv1.SnapshotEventSeq{JobId: id, Seq: n.seqs[id]})
	}
	return m
}

// timerRecord is a timer as its command names it; nil for none.
func timerRecord(tm *jobTimer) *musterv1.FireTimerCommand {
	if tm == nil {
		return nil
	}
	c := tm.cmd
	return &musterv1.FireTimerCommand{JobId: c.JobID, RoundId: c.RoundID, Timer: int32(c.Timer),
		DeadlineUnixNs: unixNs(c.Deadline), Followed: c.Followed}
}

func (s *Store) jobRecordLocked(j *job, ref func(*node) (string, error)) (*musterv1.SnapshotJob, error) {
	m := &musterv1.SnapshotJob{Id: j.id, Spec: j.spec, State: j.state, Owner: j.owner, Token: j.token,
		Outcome: &musterv1.SnapshotOutcome{Kind: int32(j.outcome.kind), Failure: j.outcome.failure, Loss: j.outcome.loss,
			Code: j.outcome.code, Reason: j.outcome.reason},
		Restarts: j.restarts, SubmittedUnixNs: unixNs(j.submitted), StartedUnixNs: unixNs(j.started), EndedUnixNs: unixNs(j.ended),
		Rebuilt: j.rebuilt, LastExitUnixNs: unixNs(j.lastExit),
		FencedUntilUnixNs: unixNs(j.fencedUntil), FencedFor: j.fencedFor, RanOn: j.ranOn, Ran: j.ran,
		Backoffs: j.backoffs, PendingBackoffNs: int64(j.pendingBackoff), NotBeforeUnixNs: unixNs(j.notBefore),
		Causes: j.causes, CausesDropped: j.causesDropped, Timer: timerRecord(j.timer)}
	for _, sig := range slices.Sorted(maps.Keys(j.signalled)) {
		m.Signalled = append(m.Signalled, &musterv1.SnapshotSignal{Signal: sig, AtUnixNs: unixNs(j.signalled[sig])})
	}
	if j.torchStoreNode != nil {
		session, err := ref(j.torchStoreNode)
		if err != nil {
			return nil, err
		}
		m.StoreNode = &session
	}
	if r := j.stdin; r != nil {
		r.mu.Lock()
		m.Stdin = &musterv1.SnapshotStdin{Pending: r.pending, Readers: slices.Sorted(maps.Keys(r.readers))}
		r.mu.Unlock()
	}
	if p := j.place; p != nil {
		for _, name := range slices.Sorted(maps.Keys(p.unhealthy)) {
			m.Unhealthy = append(m.Unhealthy, &musterv1.SnapshotUnhealthy{Node: name, Health: p.unhealthy[name]})
		}
	}
	var err error
	if m.Round, err = s.roundRecordLocked(j.round, ref); err != nil {
		return nil, fmt.Errorf("round %s: %w", j.round.id, err)
	}
	l := j.events
	l.mu.Lock()
	// Copies: a follower's read may trim the log meanwhile.
	m.Events = &musterv1.SnapshotEventLog{First: l.first, Next: l.next, Base: l.base, Total: l.total,
		Events: slices.Clone(l.events), Ends: slices.Clone(l.ends), Closed: l.closed}
	l.mu.Unlock()
	return m, nil
}

func (s *Store) roundRecordLocked(r *round, ref func(*node) (string, error)) (*musterv1.SnapshotRound, error) {
	m := &musterv1.SnapshotRound{Id: r.id, Number: r.number, State: int32(r.state), Nproc: r.nproc, WorldSize: r.worldSize,
		Exited: slices.Sorted(maps.Keys(r.exited)), Restart: r.restart,
		LastCall: timerRecord(r.lastCall), FenceTimer: timerRecord(r.fenceTimer), BackoffTimer: timerRecord(r.backoffTimer),
		RunningSinceUnixNs: unixNs(r.runningSince), StopSent: r.stopSent, StopGrace: r.stopGrace, DumpFirst: r.dumpFirst,
		Ports: r.ports, Magic: r.magic, Started: startedInOrder(r),
		AbortRanks: r.abortRanks, SinceUnixNs: unixNs(r.since), Deadline: timerRecord(r.deadline), Progress: r.progress,
		ProgressAtUnixNs: unixNs(r.progressAt), ProgressTimer: timerRecord(r.progressTimer), Open: s.rounds[r.id] == r}
	for _, n := range r.nodes {
		rn := &musterv1.SnapshotRoundNode{Rank: -1}
		if rank, ok := r.rank[n]; ok {
			rn.Rank = rank
		}
		if n.placeholder {
			rn.Placeholder = nodeRecord(n)
		} else {
			var err error
			if rn.Session, err = ref(n); err != nil {
				return nil, err
			}
		}
		m.Nodes = append(m.Nodes, rn)
	}
	for _, g := range r.gpus {
		m.Gpus = append(m.Gpus, &musterv1.SnapshotGpus{Indexes: g})
	}
	sessions := func(set map[*node]bool) ([]string, error) {
		var out []string
		for n := range set {
			session, err := ref(n)
			if err != nil {
				return nil, err
			}
			out = append(out, session)
		}
		slices.Sort(out)
		return out, nil
	}
	var err error
	if m.Left, err = sessions(r.left); err != nil {
		return nil, err
	}
	if q := r.hang; q != nil {
		h := &musterv1.SnapshotHang{Ras: q.ras, Running: q.running, Timer: timerRecord(q.timer), Held: q.held}
		for _, rank := range slices.Sorted(maps.Keys(q.clues)) {
			h.Clues = append(h.Clues, q.clues[rank])
		}
		if h.From, err = sessions(q.from); err != nil {
			return nil, err
		}
		m.Hang = h
	}
	return m, nil
}

// table is a job table read from a snapshot, before it replaces the store's.
type table struct {
	id        string
	nodes     map[string]*node
	byName    map[string]*node
	retired   map[string]*node
	jobs      map[string]*job
	order     []string
	rounds    map[string]*round
	waiting   []*job
	timers    map[timerKey]*jobTimer
	schedule  map[string]musterv1.NodeSchedule
	departed  map[string]*departure
	forgotten map[string]bool
	events    int // events read, every job's together
}

// Restore replaces the store's job table with the one b holds (Snapshot).
// Only a follower restores: a leader acts on its table (ErrLeading). b is
// checked whole, and bounded, before anything is replaced.
func (s *Store) Restore(b []byte) error {
	if s.Leading() {
		return ErrLeading
	}
	m := &musterv1.StoreSnapshot{}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("store snapshot: %w", err)
	}
	t, err := s.readTable(m)
	if err != nil {
		return fmt.Errorf("store snapshot: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.leading:
		return ErrLeading
	case s.closed:
		return fmt.Errorf("store snapshot: the store is closed")
	}
	// What waits on the old table hears that it is gone.
	for _, n := range s.nodes {
		if n.lost != nil {
			n.lost.Stop()
		}
		closeOnce(n.gone)
	}
	for _, tm := range s.timers {
		tm.disarmLocked()
	}
	for _, j := range s.jobs {
		j.events.close()
		if j.stdin != nil {
			j.stdin.close()
		}
	}
	s.id, s.nodes, s.byName, s.jobs, s.order, s.rounds, s.waiting = t.id, t.nodes, t.byName, t.jobs, t.order, t.rounds, t.waiting
	s.timers, s.schedule, s.departed, s.forgotten = t.timers, t.schedule, t.departed, t.forgotten
	s.jobsChangedLocked()
	s.log.Info("store restored from a snapshot", zap.Int("nodes", len(t.nodes)), zap.Int("jobs", len(t.jobs)),
		zap.Int("timers", len(t.timers)), zap.Int("events", t.events))
	return nil
}

// readTable checks a snapshot and builds the table it holds.
func (s *Store) readTable(m *musterv1.StoreSnapshot) (*table, error) {
	counts := []struct {
		what     string
		n, bound int
	}{
		{"nodes", len(m.GetNodes()), maxSnapshotNodes},
		{"removed nodes", len(m.GetRetiredNodes()), maxSnapshotNodes},
		{"jobs", len(m.GetJobs()), maxSnapshotJobs},
		{"waiting jobs", len(m.GetWaiting()), maxSnapshotJobs},
		{"timers", len(m.GetTimers()), maxSnapshotTimers},
		{"cordoned nodes", len(m.GetSchedules()), maxSnapshotNames},
		{"departed nodes", len(m.GetDeparted()), maxSnapshotNames},
		{"forgotten jobs", len(m.GetForgotten()), maxSnapshotNames},
	}
	for _, c := range counts {
		if c.n > c.bound {
			return nil, fmt.Errorf("%d %s, more than %d", c.n, c.what, c.bound)
		}
	}
	if m.GetStoreId() == "" {
		return nil, fmt.Errorf("no store ID")
	}
	t := &table{id: m.GetStoreId(), nodes: map[string]*node{}, byName: map[string]*node{}, retired: map[string]*node{},
		jobs: map[string]*job{}, rounds: map[string]*round{}, timers: map[timerKey]*jobTimer{},
		schedule: map[string]musterv1.NodeSchedule{}, departed: map[string]*departure{}, forgotten: map[string]bool{}}
	for _, sm := range m.GetSchedules() {
		if _, known := musterv1.NodeSchedule_name[int32(sm.GetSchedule())]; !known || sm.GetSchedule() == 0 {
			return nil, fmt.Errorf("node %q: schedule %d", sm.GetNode(), sm.GetSchedule())
		}
		if _, dup := t.schedule[sm.GetNode()]; dup {
			return nil, fmt.Errorf("node %q: two schedules", sm.GetNode())
		}
		t.schedule[sm.GetNode()] = sm.GetSchedule()
	}
	for _, nm := range m.GetNodes() {
		n, err := readNode(nm, false)
		if err != nil {
			return nil, err
		}
		name := n.info.GetName()
		if t.nodes[n.session] != nil || t.byName[name] != nil {
			return nil, fmt.Errorf("node %s, session %s: registered twice", name, n.session)
		}
		t.nodes[n.session], t.byName[name] = n, n
	}
	for _, nm := range m.GetRetiredNodes() {
		n, err := readNode(nm, false)
		if err != nil {
			return nil, err
		}
		if t.nodes[n.session] != nil || t.retired[n.session] != nil {
			return nil, fmt.Errorf("removed node %s: session %s named twice", n.info.GetName(), n.session)
		}
		closeOnce(n.gone)
		t.retired[n.session] = n
	}
	for _, tm := range m.GetTimers() {
		c, err := readTimer(tm)
		if err != nil {
			return nil, err
		}
		k := keyOf(c)
		if t.timers[k] != nil {
			return nil, fmt.Errorf("timer %s of job %s: set twice", c.Timer, c.JobID)
		}
		t.timers[k] = &jobTimer{cmd: *c}
	}
	for _, jm := range m.GetJobs() {
		j, err := s.readJob(t, jm)
		if err != nil {
			return nil, fmt.Errorf("job %s: %w", jm.GetId(), err)
		}
		if t.jobs[j.id] != nil {
			return nil, fmt.Errorf("job %s: twice", j.id)
		}
		t.jobs[j.id] = j
		t.order = append(t.order, j.id)
		if r := j.round; jm.GetRound().GetOpen() {
			if t.rounds[r.id] != nil {
				return nil, fmt.Errorf("round %q: two not ended", r.id)
			}
			t.rounds[r.id] = r
		}
	}
	// A registered node runs its jobs' current rounds: what resuming it reads.
	members := map[*round]map[*node]bool{}
	for _, session := range slices.Sorted(maps.Keys(t.nodes)) {
		n := t.nodes[session]
		for id := range n.jobs {
			j := t.jobs[id]
			if j == nil || j.finished() {
				continue
			}
			if members[j.round] == nil {
				members[j.round] = map[*node]bool{}
				for _, m := range j.round.nodes {
					members[j.round][m] = true
				}
			}
			if !members[j.round][n] {
				return nil, fmt.Errorf("node %s runs job %s, whose round does not name it", n.info.GetName(), id)
			}
		}
	}
	if t.events > maxSnapshotEvents {
		return nil, fmt.Errorf("%d events, more than %d", t.events, maxSnapshotEvents)
	}
	for _, id := range m.GetWaiting() {
		j := t.jobs[id]
		if j == nil {
			return nil, fmt.Errorf("waiting job %q: not among the jobs", id)
		}
		t.waiting = append(t.waiting, j)
	}
	for _, dm := range m.GetDeparted() {
		if t.departed[dm.GetNode()] != nil {
			return nil, fmt.Errorf("node %q: departed twice", dm.GetNode())
		}
		t.departed[dm.GetNode()] = &departure{since: fromUnixNs(dm.GetSinceUnixNs()), agentLeft: dm.GetAgentLeft()}
	}
	for _, id := range m.GetForgotten() {
		t.forgotten[id] = true
	}
	return t, nil
}

// readNode builds a node from its record; placeholder says which kind the
// record must be.
func readNode(m *musterv1.SnapshotNode, placeholder bool) (*node, error) {
	info := m.GetInfo()
	switch {
	case info == nil:
		return nil, fmt.Errorf("session %s: a node without its description", m.GetSession())
	case m.GetPlaceholder() != placeholder:
		return nil, fmt.Errorf("node %s: placeholder %t where %t belongs", info.GetName(), m.GetPlaceholder(), placeholder)
	case len(info.GetGpus()) > jobspec.MaxGPUs:
		return nil, fmt.Errorf("node %s: %d GPUs, more than %d", info.GetName(), len(info.GetGpus()), jobspec.MaxGPUs)
	case len(m.GetKey()) > maxNodeKeyBytes:
		return nil, fmt.Errorf("node %s: node key of %d bytes, more than %d", info.GetName(), len(m.GetKey()), maxNodeKeyBytes)
	case len(m.GetJobs()) > maxSnapshotJobs || len(m.GetSeqs()) > maxSnapshotJobs || len(m.GetBusy()) > maxSnapshotJobs:
		return nil, fmt.Errorf("node %s: %d jobs, %d event counts and %d busy GPUs, more than %d", info.GetName(),
			len(m.GetJobs()), len(m.GetSeqs()), len(m.GetBusy()), maxSnapshotJobs)
	}
	n := newNode(m.GetSession(), info, m.GetKey())
	n.placeholder, n.leaving, n.health, n.renewed = m.GetPlaceholder(), m.GetLeaving(), m.GetHealth(), fromUnixNs(m.GetRenewedUnixNs())
	for _, id := range m.GetJobs() {
		n.jobs[id] = true
	}
	for _, g := range m.GetBusy() {
		n.busy[g.GetIndex()] = g.GetJobId()
	}
	for _, sq := range m.GetSeqs() {
		n.seqs[sq.GetJobId()] = sq.GetSeq()
	}
	return n, nil
}

func readTimer(m *musterv1.FireTimerCommand) (*FireTimer, error) {
	c := &FireTimer{JobID: m.GetJobId(), RoundID: m.GetRoundId(), Timer: JobTimer(m.GetTimer()),
		Deadline: fromUnixNs(m.GetDeadlineUnixNs()), Followed: m.GetFollowed()}
	if c.Timer < TimerWaitDeadline || c.Timer > TimerHangVerdict {
		return nil, fmt.Errorf("job %s: timer kind %d", c.JobID, m.GetTimer())
	}
	return c, nil
}

// timerOf is the recorded timer a job or round names; one that fired while
// still named (a job's wall-clock limit) is not recorded, and stands alone.
func (t *table) timerOf(m *musterv1.FireTimerCommand) (*jobTimer, error) {
	if m == nil {
		return nil, nil
	}
	c, err := readTimer(m)
	if err != nil {
		return nil, err
	}
	if tm := t.timers[keyOf(c)]; tm != nil {
		return tm, nil
	}
	return &jobTimer{cmd: *c}, nil
}

// nodeOf is the registered or removed node of a session.
func (t *table) nodeOf(session string) (*node, error) {
	if n := t.nodes[session]; n != nil {
		return n, nil
	}
	if n := t.retired[session]; n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("session %q: no such node", session)
}

func (s *Store) readJob(t *table, m *musterv1.SnapshotJob) (*job, error) {
	om := m.GetOutcome()
	_, knownState := musterv1.JobState_name[int32(m.GetState())]
	switch {
	case m.GetId() == "":
		return nil, fmt.Errorf("a job without its ID")
	case m.GetSpec() == nil:
		return nil, fmt.Errorf("no spec")
	case !knownState:
		return nil, fmt.Errorf("job state %d", m.GetState())
	case om.GetKind() < int32(undecided) || om.GetKind() > int32(notRun):
		return nil, fmt.Errorf("outcome kind %d", om.GetKind())
	case m.GetRound() == nil || m.GetEvents() == nil:
		return nil, fmt.Errorf("no round or no event log")
	case len(m.GetRan()) > maxRoundsShown || len(m.GetCauses()) > maxRoundCauses:
		return nil, fmt.Errorf("%d rounds shown and %d causes, more than %d and %d", len(m.GetRan()), len(m.GetCauses()),
			maxRoundsShown, maxRoundCauses)
	case len(m.GetSignalled()) > maxSnapshotSigs || len(m.GetUnhealthy()) > maxSnapshotNodes || len(m.GetRanOn()) > maxSnapshotNodes:
		return nil, fmt.Errorf("%d signals, %d unhealthy nodes and %d nodes it ran on: too many", len(m.GetSignalled()),
			len(m.GetUnhealthy()), len(m.GetRanOn()))
	}
	j := &job{id: m.GetId(), spec: m.GetSpec(), state: m.GetState(), owner: m.GetOwner(), token: m.GetToken(),
		outcome:  outcome{kind: outcomeKind(om.GetKind()), failure: om.GetFailure(), loss: om.GetLoss(), code: om.GetCode(), reason: om.GetReason()},
		restarts: m.GetRestarts(), submitted: fromUnixNs(m.GetSubmittedUnixNs()), started: fromUnixNs(m.GetStartedUnixNs()),
		rebuilt: m.GetRebuilt(), lastExit: fromUnixNs(m.GetLastExitUnixNs()),
		ended: fromUnixNs(m.GetEndedUnixNs()), fencedUntil: fromUnixNs(m.GetFencedUntilUnixNs()), fencedFor: m.GetFencedFor(),
		ranOn: m.GetRanOn(), ran: m.GetRan(), backoffs: m.GetBackoffs(), pendingBackoff: time.Duration(m.GetPendingBackoffNs()),
		notBefore: fromUnixNs(m.GetNotBeforeUnixNs()), causes: m.GetCauses(), causesDropped: m.GetCausesDropped()}
	for _, sg := range m.GetSignalled() {
		if j.signalled == nil {
			j.signalled = map[int32]time.Time{}
		}
		j.signalled[sg.GetSignal()] = fromUnixNs(sg.GetAtUnixNs())
	}
	j.place = newPlacement(j.spec, t.schedule, &j.ranOn)
	for _, u := range m.GetUnhealthy() {
		if j.place.unhealthy == nil {
			j.place.unhealthy = map[string]*musterv1.NodeHealth{}
		}
		j.place.unhealthy[u.GetNode()] = u.GetHealth()
	}
	var err error
	if j.timer, err = t.timerOf(m.GetTimer()); err != nil {
		return nil, err
	}
	if m.StoreNode != nil {
		if j.torchStoreNode, err = t.nodeOf(m.GetStoreNode()); err != nil {
			return nil, fmt.Errorf("its TCPStore's node: %w", err)
		}
	}
	if j.round, err = readRound(t, j, m.GetRound()); err != nil {
		return nil, fmt.Errorf("round %s: %w", m.GetRound().GetId(), err)
	}
	if j.events, err = s.readEvents(m.GetEvents()); err != nil {
		return nil, err
	}
	t.events += len(j.events.events)
	if sm := m.GetStdin(); sm != nil {
		if len(sm.GetReaders()) > jobspec.MaxNodes || sm.GetPending() && len(sm.GetReaders()) > 0 {
			return nil, fmt.Errorf("stdin: %d readers, pending %t", len(sm.GetReaders()), sm.GetPending())
		}
		j.stdin = newStdinRelay(nil)
		if !sm.GetPending() {
			j.stdin.expect(sm.GetReaders())
		}
		if j.finished() {
			j.stdin.close()
		}
	}
	return j, nil
}

func readRound(t *table, j *job, m *musterv1.SnapshotRound) (*round, error) {
	st := roundState(m.GetState())
	world := m.GetWorldSize()
	nodes := int32(len(m.GetNodes()))
	switch {
	case st < roundWaiting || st > roundEnded:
		return nil, fmt.Errorf("round state %d", m.GetState())
	case m.GetNproc() < 1 || m.GetNproc() > jobspec.MaxNProc:
		return nil, fmt.Errorf("%d workers a node, want 1 to %d", m.GetNproc(), jobspec.MaxNProc)
	case world < 0 || world > maxSnapshotWorld || nodes > jobspec.MaxNodes:
		return nil, fmt.Errorf("world size %d, %d nodes: outside 0..%d, 0..%d", world, nodes, maxSnapshotWorld, jobspec.MaxNodes)
	case len(m.GetGpus()) != len(m.GetNodes()):
		return nil, fmt.Errorf("GPUs of %d nodes, %d nodes", len(m.GetGpus()), nodes)
	case st >= roundReserving && st < roundEnded && (nodes == 0 || world != nodes*m.GetNproc()):
		return nil, fmt.Errorf("%s with %d nodes of %d workers, world size %d", st, nodes, m.GetNproc(), world)
	}
	inWorld := func(what string, ranks ...int32) error {
		if len(ranks) > int(max(world, 1)) {
			return fmt.Errorf("%d %s, more than the world size %d", len(ranks), what, world)
		}
		for _, rank := range ranks {
			if rank < 0 || rank >= world {
				return fmt.Errorf("%s: rank %d outside the world size %d", what, rank, world)
			}
		}
		return nil
	}
	if err := inWorld("ranks accounted for", m.GetExited()...); err != nil {
		return nil, err
	}
	if err := inWorld("ranks to abort", m.GetAbortRanks()...); err != nil {
		return nil, err
	}
	r := &round{id: m.GetId(), number: m.GetNumber(), job: j, state: st, nproc: m.GetNproc(), worldSize: world,
		exited: map[int32]bool{}, restart: m.GetRestart(), runningSince: fromUnixNs(m.GetRunningSinceUnixNs()),
		ports: m.GetPorts(), magic: m.GetMagic(),
		stopSent: m.GetStopSent(), stopGrace: m.GetStopGrace(), dumpFirst: m.GetDumpFirst(), abortRanks: m.GetAbortRanks(),
		since: fromUnixNs(m.GetSinceUnixNs()), progress: m.GetProgress(), progressAt: fromUnixNs(m.GetProgressAtUnixNs())}
	for _, rank := range m.GetExited() {
		r.exited[rank] = true
	}
	for _, st := range m.GetStarted() {
		if err := inWorld("started ranks", st.GetRank()); err != nil {
			return nil, err
		}
		r.workerStarted(st)
	}
	if nodes > 0 {
		r.rank = make(map[*node]int32, nodes)
	}
	seen := map[*node]int32{} // a node twice in a round has one rank
	for i, rn := range m.GetNodes() {
		var n *node
		var err error
		if rn.GetPlaceholder() != nil {
			n, err = readNode(rn.GetPlaceholder(), true)
		} else {
			n, err = t.nodeOf(rn.GetSession())
		}
		if err != nil {
			return nil, fmt.Errorf("node rank %d: %w", i, err)
		}
		rank := rn.GetRank()
		if rank < -1 || rank >= nodes {
			return nil, fmt.Errorf("node rank %d: ranked %d of %d", i, rank, nodes)
		}
		if had, ok := seen[n]; ok && had != rank {
			return nil, fmt.Errorf("node %s: ranked %d and %d", n.info.GetName(), had, rank)
		}
		seen[n] = rank
		if rank >= 0 {
			r.rank[n] = rank
		}
		r.nodes = append(r.nodes, n)
		g := m.GetGpus()[i].GetIndexes()
		if len(g) > jobspec.MaxGPUs {
			return nil, fmt.Errorf("node rank %d: %d GPUs, more than %d", i, len(g), jobspec.MaxGPUs)
		}
		r.gpus = append(r.gpus, g)
	}
	var err error
	of := func(session string) (*node, error) {
		n, err := t.nodeOf(session)
		if err == nil && !slices.Contains(r.nodes, n) {
			err = fmt.Errorf("session %s: not a node of the round", session)
		}
		return n, err
	}
	for _, session := range m.GetLeft() {
		n, err := of(session)
		if err != nil {
			return nil, fmt.Errorf("a node that left: %w", err)
		}
		if r.left == nil {
			r.left = map[*node]bool{}
		}
		r.left[n] = true
	}
	timers := []struct {
		to **jobTimer
		m  *musterv1.FireTimerCommand
	}{{&r.lastCall, m.GetLastCall()}, {&r.fenceTimer, m.GetFenceTimer()}, {&r.backoffTimer, m.GetBackoffTimer()},
		{&r.deadline, m.GetDeadline()}, {&r.progressTimer, m.GetProgressTimer()}}
	for _, tm := range timers {
		if *tm.to, err = t.timerOf(tm.m); err != nil {
			return nil, err
		}
	}
	if hm := m.GetHang(); hm != nil {
		if world != nodes*m.GetNproc() {
			return nil, fmt.Errorf("a hang looked into with %d nodes of %d workers, world size %d", nodes, m.GetNproc(), world)
		}
		if r.hang, err = readHang(t, r, hm, of, inWorld); err != nil {
			return nil, fmt.Errorf("hang: %w", err)
		}
	}
	return r, nil
}

func readHang(t *table, r *round, m *musterv1.SnapshotHang, of func(string) (*node, error),
	inWorld func(string, ...int32) error) (*hangInquiry, error) {
	if len(m.GetRas()) > len(r.nodes) || len(m.GetFrom()) > len(r.nodes) {
		return nil, fmt.Errorf("%d RAS answers and clues from %d nodes, of %d nodes", len(m.GetRas()), len(m.GetFrom()), len(r.nodes))
	}
	q := &hangInquiry{clues: map[int32]*musterv1.RankClues{}, ras: m.GetRas(), from: map[*node]bool{}, running: m.GetRunning(),
		held: m.GetHeld()}
	var culprits []int32
	for _, a := range m.GetRas() {
		for _, c := range a.GetCulprits() {
			culprits = append(culprits, c.GetRank())
		}
	}
	if err := inWorld("RAS culprits", culprits...); err != nil {
		return nil, err
	}
	if err := inWorld("running ranks", m.GetRunning()...); err != nil {
		return nil, err
	}
	if h := m.GetHeld(); h != nil {
		if err := inWorld("the failure held", h.GetRank()); err != nil {
			return nil, err
		}
	}
	for _, c := range m.GetClues() {
		if err := inWorld("clues", c.GetRank()); err != nil {
			return nil, err
		}
		if q.clues[c.GetRank()] != nil {
			return nil, fmt.Errorf("clues of rank %d twice", c.GetRank())
		}
		q.clues[c.GetRank()] = c
	}
	for _, session := range m.GetFrom() {
		n, err := of(session)
		if err != nil {
			return nil, fmt.Errorf("clues from: %w", err)
		}
		q.from[n] = true
	}
	var err error
	if q.timer, err = t.timerOf(m.GetTimer()); err != nil {
		return nil, err
	}
	return q, nil
}

// readEvents rebuilds a job's event log with its counters.
func (s *Store) readEvents(m *musterv1.SnapshotEventLog) (*eventLog, error) {
	evs, ends := m.GetEvents(), m.GetEnds()
	switch {
	case len(evs) > maxSnapshotEvents:
		return nil, fmt.Errorf("%d events, more than %d", len(evs), maxSnapshotEvents)
	case m.GetFirst() < 1 || m.GetNext() < m.GetFirst() || m.GetNext()-m.GetFirst() != uint64(len(evs)) || len(ends) != len(evs):
		return nil, fmt.Errorf("event log of versions %d to %d holds %d events, %d ends", m.GetFirst(), m.GetNext(), len(evs), len(ends))
	case m.GetBase() > m.GetTotal():
		return nil, fmt.Errorf("event log: %d bytes before its first event, %d in all", m.GetBase(), m.GetTotal())
	}
	prev := m.GetBase()
	for _, e := range ends {
		if e < prev || e > m.GetTotal() {
			return nil, fmt.Errorf("event log: its events' ends are not in order within %d..%d", m.GetBase(), m.GetTotal())
		}
		prev = e
	}
	l := newEventLog(s.cfg.EventCount, s.cfg.EventBytes)
	l.first, l.next, l.base, l.total, l.events, l.ends = m.GetFirst(), m.GetNext(), m.GetBase(), m.GetTotal(), evs, ends
	if m.GetClosed() {
		l.close()
	}
	return l, nil
}
