package rendezvous

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/engine/uniqueid"
	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/progress"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A job runs in numbered rounds. A round is one attempt at running it: its
// nodes in node rank order, their GPUs, two ports reserved on node rank 0
// and an NCCL unique ID. A restart is a new round of the same job with a new
// round ID, a new NCCL root port and a new unique ID (MASTER_PORT, the job's
// TCPStore, stays while node rank 0 does). Every round goes through these
// states, and roundTransitions is the one place that allows a step:
//
//	waiting ──enough nodes──► reserving ──ports reserved──► running ──a worker failed, cancel,──► stopping
//	   │                          │                            │      timeout, node lost, restart     │
//	   │ wait timeout, cancel,    │ no ports, cancel,          │ every worker                         │ every worker
//	   │ launcher gone            │ node lost, restart         │ exited well                          │ accounted for
//	   ▼                          ▼                            ▼                                      ▼
//	 ended                      ended                        ended                                  ended
//
// "waiting" is waiting for nodes: enough registered nodes with enough free
// GPUs, taken in node rank order (the job's hosts' order when it lists
// hosts, else explicit node rank, then name; see placement.go). A waiting
// round holds nothing; it forms when nodes register or GPUs are freed, and
// reports its progress to the job's followers. The job's state follows its
// current round's (roundState.jobState). A round that ends either ends its
// job or, for a restart, lets the job's next round begin waiting.
type roundState int

const (
	roundWaiting roundState = iota
	roundReserving
	roundRunning
	roundStopping
	roundEnded
)

// roundTransitions are the steps the diagram above draws, and no others.
var roundTransitions = map[roundState][]roundState{
	roundWaiting:   {roundReserving, roundEnded},
	roundReserving: {roundRunning, roundEnded},
	roundRunning:   {roundStopping, roundEnded},
	roundStopping:  {roundEnded},
}

func (st roundState) String() string {
	switch st {
	case roundWaiting:
		return "waiting for nodes"
	case roundReserving:
		return "reserving ports"
	case roundRunning:
		return "running"
	case roundStopping:
		return "stopping"
	case roundEnded:
		return "ended"
	}
	return "round state " + strconv.Itoa(int(st))
}

// jobState is the state a job shows while its current round is in st; an
// ended round's job shows how the job ended instead.
func (st roundState) jobState() musterv1.JobState {
	switch st {
	case roundRunning:
		return musterv1.JobState_JOB_STATE_RUNNING
	case roundStopping:
		return musterv1.JobState_JOB_STATE_STOPPING
	}
	return musterv1.JobState_JOB_STATE_PENDING
}

// Bounds on a waiting round's progress reports: how often at most, and how
// many names each list holds.
const (
	progressEvery = time.Second
	progressNames = 16
)

// RosterKey is the key in a job's KV that holds its nodes' addresses, space
// separated by node rank, for workers on nodes whose assignment has no roster.
const RosterKey = "muster/node_addrs"

// round fixes a job's nodes, node ranks, GPUs and world size for one attempt.
type round struct {
	id        string // unique among all rounds of all jobs
	number    int32  // 0 for a job's first round, then 1, 2, ...
	job       *job
	state     roundState
	nodes     []*node         // by node rank; empty while waiting
	rank      map[*node]int32 // node rank by node
	gpus      [][]int32       // by node rank
	nproc     int32
	worldSize int32
	exited    map[int32]bool // ranks accounted for
	// started are its workers' starts, with their bindings, by rank:
	// `launcher jobs JOB` shows them.
	started map[int32]*musterv1.WorkerStarted
	// left are its nodes whose agents said they leave, lost already: their
	// workers' exits are awaited from them, not assumed (leave.go).
	left map[*node]bool
	// restart says the job's next round begins when this one ends.
	restart bool
	// lastCall, while an elastic round waits with enough nodes for its
	// least, forms it with them when it fires (elastic.go).
	lastCall *jobTimer
	// fenceTimer forms a waiting round once the job's fence passed, and
	// backoffTimer once its restart's back-off did.
	fenceTimer   *jobTimer
	backoffTimer *jobTimer
	// runningSince is when the round began running; ports and magic are
	// what its start was made of (node rank 0's ports, the unique ID's
	// magic), from which its assignments are made again (assignmentsLocked).
	runningSince time.Time
	ports        []int32
	magic        uint64
	// stopSent says its nodes were asked to stop, with stopGrace: a round
	// is stopped once, again only to shorten the grace.
	stopSent  bool
	stopGrace int64
	// dumpFirst says a worker was found hung: the stop asks the nodes to
	// dump PyTorch's flight recorders first.
	dumpFirst bool
	// hang, once a node found ranks hung, gathers the nodes' clues until
	// the verdict; abortRanks are the ranks the verdict named, whose
	// agents abort them before the stop.
	hang       *hangInquiry
	abortRanks []int32

	// While waiting: since when, the timer that ends the wait, and the last
	// progress report sent.
	since         time.Time
	deadline      *jobTimer
	progress      *musterv1.WaitingForNodes
	progressAt    time.Time
	progressTimer *jobTimer
}

// setRoundStateLocked moves j's current round to next: the one place where a
// round's state changes. A step the diagram does not draw is a bug: it is
// refused (refusedLocked).
func (s *Store) setRoundStateLocked(j *job, next roundState) error {
	r := j.round
	if !slices.Contains(roundTransitions[r.state], next) {
		return s.refusedLocked(fmt.Errorf("job %s: round %s (%d): state %s to %s refused", j.id, r.id, r.number, r.state, next))
	}
	s.log.Debug("round state", zap.String("job", j.id), zap.String("round", r.id), zap.Int32("number", r.number),
		zap.Stringer("from", r.state), zap.Stringer("to", next))
	r.state = next
	if next != roundEnded {
		s.setJobStateLocked(j, next.jobState())
	}
	return nil
}

// startRoundLocked begins j's next round (its first when it has none): the
// round waits for nodes, and forms at once when they are there.
func (s *Store) startRoundLocked(j *job) {
	spec := j.spec
	nproc := jobspec.WorkersPerNode(spec)
	r := &round{job: j, state: roundWaiting, nproc: nproc, worldSize: spec.Nnodes * nproc, exited: map[int32]bool{},
		since: s.now()}
	if j.round != nil {
		r.number = j.round.number + 1
	}
	// Named by its job and number, a round's ID is the same wherever the
	// job's commands are applied.
	r.id = fmt.Sprintf("%s-r%d", j.id, r.number)
	j.round = r
	s.jobsChangedLocked()
	s.rounds[r.id] = r
	s.setJobStateLocked(j, roundWaiting.jobState())
	s.waiting = append(s.waiting, j)
	// A restart's back-off does not count against the wait for nodes.
	backoff := j.pendingBackoff
	j.notBefore, j.pendingBackoff = r.since.Add(backoff), 0
	if d := time.Duration(spec.WaitTimeoutMs) * time.Millisecond; d > 0 {
		r.deadline = s.afterLocked(d+backoff, j, r, TimerWaitDeadline)
	}
	s.tryFormLocked(j)
}

// tryFormLocked forms j's waiting round if enough nodes are ready, and
// otherwise reports its progress, or fails the job when it may not wait.
func (s *Store) tryFormLocked(j *job) {
	spec := j.spec
	if s.closed || j.round.state != roundWaiting {
		return
	}
	if s.fencedLocked(j) {
		s.progressLocked(j)
		return
	}
	if s.backingOffLocked(j) {
		return
	}
	// Counting is cheap; ordering the nodes is done only when it pays.
	place := s.placementOf(j)
	count := s.countReadyLocked(place)
	if count >= int(spec.Nnodes) {
		picked, _ := s.pickLocked(place)
		s.formLocked(j, picked)
		return
	}
	if count >= leastNodes(spec) && s.lastCallLocked(j) {
		return
	}
	if spec.WaitTimeoutMs <= 0 && count < leastNodes(spec) {
		picked, unusable := s.pickLocked(place)
		s.decideLocked(j, outcome{kind: notRun, code: 1, reason: formError(place, len(s.nodes), picked, unusable).Error()})
		s.finishLocked(j)
		return
	}
	s.progressLocked(j)
}

// retryWaitingLocked lets waiting rounds form, oldest first, after nodes
// came or GPUs were freed; the others report their progress.
func (s *Store) retryWaitingLocked() {
	for _, j := range slices.Clone(s.waiting) {
		if !j.finished() && j.round.state == roundWaiting {
			s.tryFormLocked(j)
		}
	}
}

// ready says whether n can take a node of spec now.
func ready(n *node, spec *musterv1.JobSpec) bool {
	free := 0
	for _, g := range n.info.GetGpus() {
		if _, busy := n.busy[g.GetIndex()]; !busy {
			free++
		}
	}
	return int32(free) >= spec.Gpus
}

// formError says why a round cannot form now. With hosts or excluded nodes
// it says what waiting would: which listed hosts are missing, which nodes
// are excluded.
func formError(p *placement, registered int, picked []*node, unusable []string) error {
	spec := p.spec
	switch {
	case registered == 0:
		return fmt.Errorf("no agent is registered with the store")
	case len(spec.Hosts) > 0 || len(spec.Exclude) > 0 || len(p.unhealthy) > 0:
		where := ""
		if len(spec.Hosts) > 0 {
			where = " on the listed hosts"
		}
		return fmt.Errorf("--nnodes %d%s: %s", spec.Nnodes, where, progress.DescribeWaiting(&musterv1.WaitingForNodes{
			Wanted: spec.Nnodes, Ready: int32(len(picked)), ReadyNodes: firstNames(picked, progressNames), Unusable: unusable}))
	case spec.Gpus > 0 && len(unusable) > 0:
		return fmt.Errorf("--gpus %d: %s", spec.Gpus, strings.Join(unusable, "; "))
	case len(unusable) > 0:
		// Nodes that are there but may not be taken: cordoned, leaving.
		return fmt.Errorf("--nnodes %d: %s", spec.Nnodes, progress.DescribeWaiting(&musterv1.WaitingForNodes{
			Wanted: spec.Nnodes, Ready: int32(len(picked)), ReadyNodes: firstNames(picked, progressNames), Unusable: unusable}))
	}
	return fmt.Errorf("--nnodes %d: only %d node(s) registered with enough free GPUs", spec.Nnodes, len(picked))
}

// formLocked gives j's waiting round its nodes and their GPUs, and asks node
// rank 0 to reserve the round's ports.
func (s *Store) formLocked(j *job, picked []*node) {
	r := j.round
	s.unwaitLocked(r)
	r.nodes = picked
	j.ranLocked(picked)
	r.worldSize = int32(len(picked)) * r.nproc
	r.rank = make(map[*node]int32, len(picked))
	for i, n := range picked {
		r.rank[n] = int32(i)
		g := freeGPUs(n)[:j.spec.Gpus]
		for _, idx := range g {
			n.busy[idx] = j.id
		}
		n.jobs[j.id] = true
		// A round's events are numbered from 1 by its agents' publishers.
		delete(n.seqs, j.id)
		r.gpus = append(r.gpus, g)
	}
	s.setRoundStateLocked(j, roundReserving)
	if j.stdin != nil && r.number == 0 {
		j.stdin.expect(stdinSessionsLocked(j.spec, r))
	}
	s.log.Info("round formed", zap.String("job", j.id), zap.String("round", r.id), zap.Int32("number", r.number),
		zap.Int("nodes", len(picked)), zap.Duration("waited", s.now().Sub(r.since)))
	s.reservePortsLocked(j)
}

// reservePortsLocked asks node rank 0 of j's round for two ports:
// MASTER_PORT, where its agent serves the job's TCPStore (one port for every
// round it is node rank 0 in) unless the job opted out, and the NCCL
// bootstrap root.
func (s *Store) reservePortsLocked(j *job) {
	n := j.round.nodes[0]
	agentStore := !j.spec.GetNoAgentStore()
	if agentStore && j.torchStoreNode != n {
		s.releaseTorchStoreLocked(j)
		j.torchStoreNode = n
	}
	s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_ReservePorts{
		ReservePorts: &musterv1.ReservePorts{RoundId: j.round.id, Count: 2, JobId: j.id, AgentStore: agentStore}}})
}

// A job's TCPStore has one owner, the store: it asks node rank 0's agent to
// serve it, and tells that agent when no round needs it any more. A node
// gone at that moment reports what it still serves when it registers again
// (to this store or to one restarted), and is told then.

// releaseTorchStoreLocked tells the node that served j's TCPStore to close it,
// if it is registered; otherwise its registration will.
func (s *Store) releaseTorchStoreLocked(j *job) {
	n := j.torchStoreNode
	j.torchStoreNode = nil
	if n == nil {
		return
	}
	if _, registered := s.nodes[n.session]; registered {
		s.sendReleaseLocked(n, j.id)
	}
}

// releaseUnneededLocked tells a node that registers to close the TCPStores
// it reports that no job needs from it, and takes the others back as the
// jobs' stores (a restarted store learns them so).
func (s *Store) releaseUnneededLocked(n *node, torchStores []string) {
	for _, id := range torchStores {
		j := s.jobs[id]
		switch {
		case j == nil || j.finished() || j.spec.GetNoAgentStore():
		case j.torchStoreNode == n:
			continue
		case j.torchStoreNode == nil && len(j.round.nodes) > 0 && j.round.nodes[0] == n:
			j.torchStoreNode = n
			continue
		}
		s.sendReleaseLocked(n, id)
	}
}

func (s *Store) sendReleaseLocked(n *node, job string) {
	s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_ReleaseStore{
		ReleaseStore: &musterv1.ReleaseStore{JobId: job}}})
}

// unwaitLocked ends what a waiting round keeps going: its timers, its place
// among the waiting.
func (s *Store) unwaitLocked(r *round) {
	for _, t := range []*jobTimer{r.deadline, r.progressTimer, r.lastCall, r.fenceTimer, r.backoffTimer} {
		s.stopTimerLocked(t)
	}
	r.deadline, r.progressTimer, r.lastCall, r.fenceTimer, r.backoffTimer = nil, nil, nil, nil, nil
	s.waiting = slices.DeleteFunc(s.waiting, func(j *job) bool { return j.round == r })
}

// progressLocked reports a waiting round's progress when it changed, at
// most once per progressEvery: a later change is sent when the time comes.
func (s *Store) progressLocked(j *job) {
	r := j.round
	if wait := progressEvery - s.now().Sub(r.progressAt); wait > 0 {
		if r.progressTimer == nil {
			r.progressTimer = s.afterLocked(wait, j, r, TimerProgress)
		}
		return
	}
	picked, unusable := s.pickLocked(s.placementOf(j))
	p := &musterv1.WaitingForNodes{Round: r.number, Wanted: j.spec.Nnodes, Ready: int32(len(picked)),
		ReadyNodes: firstNames(picked, progressNames), TimeoutMs: j.spec.WaitTimeoutMs, Least: j.spec.MinNodes}
	p.Unusable = unusable[:min(len(unusable), progressNames)]
	if j.fencedUntil.After(s.now()) {
		// Its nodes may all be ready: say why it does not form.
		p.Held, p.HeldUntilUnixMs = j.fencedFor, j.fencedUntil.UnixMilli()
	}
	if proto.Equal(p, r.progress) {
		return
	}
	r.progress, r.progressAt = p, s.now()
	s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_Waiting{Waiting: proto.Clone(p).(*musterv1.WaitingForNodes)}})
}

func firstNames(nodes []*node, limit int) []string {
	var names []string
	for _, n := range nodes[:min(len(nodes), limit)] {
		names = append(names, n.info.GetName())
	}
	return names
}

// waitExpiredLocked fails a job whose round r waited d for nodes in vain,
// naming the nodes there are and how many are missing.
func (s *Store) waitExpiredLocked(j *job, r *round, d time.Duration) {
	if r.state != roundWaiting {
		return
	}
	picked, unusable := s.pickLocked(s.placementOf(j))
	reason := fmt.Sprintf("waited %s for nodes: %s", d, progress.DescribeWaiting(&musterv1.WaitingForNodes{
		Wanted: j.spec.Nnodes, Ready: int32(len(picked)), ReadyNodes: firstNames(picked, progressNames), Unusable: unusable,
		Least: j.spec.MinNodes}))
	s.log.Info("round wait timed out", zap.String("job", j.id), zap.String("round", r.id), zap.String("reason", reason))
	s.decideLocked(j, outcome{kind: notRun, code: 1, reason: reason})
	s.finishLocked(j)
}

// endRoundLocked ends j's current round: it gives back the round's GPUs
// and stops what a waiting round keeps going.
func (s *Store) endRoundLocked(j *job) {
	r := j.round
	if r.state == roundEnded {
		return
	}
	s.setRoundStateLocked(j, roundEnded)
	s.unwaitLocked(r)
	delete(s.rounds, r.id)
	for _, n := range r.nodes {
		for g, owner := range n.busy {
			if owner == j.id {
				delete(n.busy, g)
			}
		}
		delete(n.jobs, j.id)
	}
}

// roundOverLocked is called once every worker of j's round is accounted
// for: the job's next round begins if the round was restarted, and the job
// ends otherwise.
func (s *Store) roundOverLocked(j *job) {
	if j.round.restart && !j.decided() {
		s.endRoundLocked(j)
		s.startRoundLocked(j)
		s.retryWaitingLocked()
		return
	}
	s.finishLocked(j)
}

// Restart ends a job's current round and begins its next: running workers
// are stopped with the job's kill timeout, and once every one of them is
// accounted for the next round waits for nodes, reserves new ports and
// mints a new unique ID. It returns the next round's number. A round that
// still waits for nodes has nothing to restart.
func (s *Store) Restart(jobID, reason string) (int32, error) {
	res, err := s.Apply(&RestartJob{JobID: jobID, Reason: reason})
	return res.Round, err
}

func (s *Store) restartJobLocked(c *RestartJob) (int32, error) {
	jobID, reason := c.JobID, c.Reason
	j := s.jobs[jobID]
	if j == nil {
		return 0, fmt.Errorf("job %q: %w", jobID, ErrNotFound)
	}
	r := j.round
	switch {
	case j.finished():
		return 0, fmt.Errorf("job %s has ended", jobID)
	case r.restart:
		return r.number + 1, nil
	}
	switch r.state {
	case roundWaiting:
		return 0, fmt.Errorf("job %s: round %d is still waiting for nodes: nothing to restart", jobID, r.number)
	case roundStopping:
		return 0, fmt.Errorf("job %s is stopping: %s", jobID, j.outcome.reason)
	}
	s.restartLocked(j, reason, false)
	return r.number + 1, nil
}

func describeGPUs(n *node, free []int32) string {
	all := n.info.GetGpus()
	if len(all) == 0 {
		why := ""
		if e := n.info.GetGpuError(); e != "" {
			why = " (" + e + ")"
		}
		return fmt.Sprintf("node %s has no GPUs%s; use --nproc N to run workers without GPUs", n.info.GetName(), why)
	}
	var names []string
	for _, g := range all {
		names = append(names, fmt.Sprintf("%d: %s", g.GetIndex(), g.GetName()))
	}
	return fmt.Sprintf("node %s has %d GPUs (%s), %d free", n.info.GetName(), len(all), strings.Join(names, ", "), len(free))
}

func freeGPUs(n *node) []int32 {
	var free []int32
	for _, g := range n.info.GetGpus() {
		if _, busy := n.busy[g.GetIndex()]; !busy {
			free = append(free, g.GetIndex())
		}
	}
	return free
}

// PortsReserved completes a round with the ports node rank 0 reserved: it
// mints the NCCL unique ID and sends every node its assignment.
func (s *Store) PortsReserved(session, roundID string, ports []int32, errText string) error {
	var magic [8]byte
	rand.Read(magic[:])
	_, err := s.Apply(&CompleteRound{Session: session, RoundID: roundID, Ports: ports, Error: errText,
		Magic: binary.LittleEndian.Uint64(magic[:])})
	return err
}

func (s *Store) completeRoundLocked(c *CompleteRound) error {
	r := s.rounds[c.RoundID]
	if r == nil || r.state != roundReserving {
		return fmt.Errorf("round %q: %w or not waiting for ports", c.RoundID, ErrNotFound)
	}
	j := r.job
	if r.nodes[0].session != c.Session {
		return fmt.Errorf("round %q: ports must come from node rank 0", c.RoundID)
	}
	if errText := portsError(c); errText != "" {
		s.decideLocked(j, outcome{kind: notRun, code: 1, reason: "could not reserve ports on node " + r.nodes[0].info.GetName() + ": " + errText})
		s.finishLocked(j)
		return nil
	}
	r.ports, r.magic = c.Ports, c.Magic
	asgs, id, err := s.assignmentsLocked(j)
	if err != nil {
		return err
	}
	names := asgs[0].GetNodeNames()
	if len(names) == 0 {
		names = make([]string, len(r.nodes))
		for i, n := range r.nodes {
			names[i] = n.info.GetName()
		}
	}
	s.keepRosterLocked(j, r)
	s.setRoundStateLocked(j, roundRunning)
	s.roundRanLocked(j, names)
	s.roundStartedLocked(j, r, names, id)
	for rank, n := range r.nodes {
		s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Start{Start: asgs[rank]}})
	}
	if spec := j.spec; spec.TimeoutMs > 0 && j.timer == nil {
		// The job's wall-clock limit counts from its first round's start.
		j.timer = s.afterLocked(time.Duration(spec.TimeoutMs)*time.Millisecond, j, nil, TimerTimeout)
	}
	return nil
}

// portsError says what is wrong with the ports node rank 0 reserved for a
// round: its agent's error, or ports that are not two valid ones.
func portsError(c *CompleteRound) string {
	if c.Error == "" && (len(c.Ports) != 2 || !validPort(c.Ports[0]) || !validPort(c.Ports[1])) {
		return fmt.Sprintf("agent returned ports %v, want two in 1..65535", c.Ports)
	}
	return c.Error
}

// keepRosterLocked keeps the addresses of the nodes of j's round r in j's
// KV (RosterKey), where its workers read them.
func (s *Store) keepRosterLocked(j *job, r *round) {
	addrs := make([]string, len(r.nodes))
	for i, n := range r.nodes {
		addrs[i] = n.info.GetAddr()
	}
	if _, err := s.kv.Space(j.id).Set(RosterKey, []byte(strings.Join(addrs, " "))); err != nil {
		s.log.Warn("job roster not kept in its KV", zap.String("job", j.id), zap.Error(err))
	}
}

// roundStartedLocked records that j's round r, on the nodes named, runs
// from now: its event, with the hash of its NCCL unique ID, and its metrics.
func (s *Store) roundStartedLocked(j *job, r *round, names []string, id uniqueid.ID) {
	idHash := sha256.Sum256(id[:])
	s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_RoundStarted{RoundStarted: &musterv1.RoundStarted{
		Round: r.number, RoundId: r.id, Nodes: names, Nproc: r.nproc, WorldSize: r.worldSize, MasterAddr: r.nodes[0].info.GetAddr(),
		MasterPort: r.ports[0], UniqueIdSha256: hex.EncodeToString(idHash[:]), RestartCount: j.restarts}}})
	s.jobsChangedLocked()
	now := s.now()
	s.cfg.Recorder.RoundFormed(now.Sub(r.since))
	if r.number == 0 && !j.submitted.IsZero() {
		s.cfg.Recorder.JobStarted(now.Sub(j.submitted))
	}
	r.runningSince = now
}

// assignmentsLocked are the assignments of j's running round, by node
// rank, made from what its start was made of, and its NCCL unique ID.
func (s *Store) assignmentsLocked(j *job) ([]*musterv1.Assignment, uniqueid.ID, error) {
	r, spec := j.round, j.spec
	master := r.nodes[0].info.GetAddr()
	root := netip.AddrPortFrom(netip.MustParseAddr(master), uint16(r.ports[1]))
	id, err := uniqueid.NewWithMagic(r.magic, root)
	if err != nil {
		return nil, id, err
	}
	// The roster (every node's address, name and slots) is built once. A
	// small job's assignments all carry it; a larger job's only node rank
	// 0's, where launchers that read a hostfile run: every other node's
	// assignment stays the same size whatever the number of nodes. Workers
	// anywhere read the addresses from their job's KV (RosterKey).
	addrs := make([]string, len(r.nodes))
	names := make([]string, len(r.nodes))
	slots := make([]int32, len(r.nodes))
	for i, n := range r.nodes {
		addrs[i], names[i], slots[i] = n.info.GetAddr(), n.info.GetName(), r.nproc
	}
	commID := net.JoinHostPort(master, strconv.Itoa(int(r.ports[1])))
	asgs := make([]*musterv1.Assignment, len(r.nodes))
	for rank := range r.nodes {
		asg := &musterv1.Assignment{
			JobId:        j.id,
			RoundId:      r.id,
			Spec:         spec,
			NodeRank:     int32(rank),
			Nnodes:       int32(len(r.nodes)),
			Gpus:         r.gpus[rank],
			Nproc:        r.nproc,
			WorldSize:    r.worldSize,
			MasterAddr:   master,
			MasterPort:   r.ports[0],
			NcclCommId:   commID,
			NcclUniqueId: id[:],
			RestartCount: j.restarts,
			MaxRestarts:  spec.MaxRestarts,
			RoundNumber:  r.number,
			StoreAddr:    s.cfg.Addr,
			RunAs:        j.owner,
			JobToken:     j.token,
		}
		if rank == 0 || len(r.nodes) <= jobspec.RosterInlineNodes {
			asg.NodeAddrs, asg.NodeNames, asg.NodeSlots = addrs, names, slots
		}
		asgs[rank] = asg
	}
	return asgs, id, nil
}

func validPort(p int32) bool { return p > 0 && p < 65536 }

// globalRank and nodeOf are jobspec's rank layout in the store's int32s.
func globalRank(node, nproc, local int32) int32 {
	return int32(jobspec.GlobalRank(int(node), int(nproc), int(local)))
}

func nodeOf(rank, nproc int32) int32 { return int32(jobspec.NodeOf(int(rank), int(nproc))) }
