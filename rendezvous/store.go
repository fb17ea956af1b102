// Package rendezvous is muster's store, its state machine alone: it keeps
// the registered nodes and their leases, forms a round for each job (nodes,
// node ranks, GPUs, ports, the NCCL unique ID), queues assignments for
// agents, collects job events, and decides how each job ends. Every change
// to its job table is a command applied in order (commands.go). Job states
// are drawn in lifecycle.go, round states in rounds.go, leases and losses
// in lease.go. Package storeserver serves it over gRPC; storeclient dials it.
package rendezvous

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/failure"
	"github.com/musterhq/muster/kv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Bounds on what the store keeps per node and per job.
const (
	defaultEventBytes = 8 << 20
	defaultEventCount = 2_000_000
)

// StoreConfig configures a Store.
type StoreConfig struct {
	Logger *zap.Logger
	// Addr is the store's address as workers reach it (MUSTER_STORE_ADDR).
	Addr string
	// EventBytes and EventCount bound each job's event log.
	EventBytes int
	EventCount int
	// SessionGrace is how long a node whose connection broke keeps its
	// jobs, waiting for its agent to register again (see session.go).
	SessionGrace time.Duration
	// DetachGrace is how long a job whose launcher's stream ended waits for
	// it to follow again before it is stopped; 10 s when 0.
	DetachGrace time.Duration
	// AgentGone, when set, says whether the named node's agent is gone (its
	// process died) within timeout; see liveness.go.
	AgentGone func(name string, timeout time.Duration) bool
	// NodeTimeout makes the store find lost nodes itself: it asks other
	// nodes to probe a node whose agent renewed no lease for NodeTimeout
	// (lease.go). 0 turns it off.
	NodeTimeout time.Duration
	// OwnNode names the node whose agent shares the store's process, when
	// one does: it sees what the store sees, so it is never asked to probe
	// another node, and its word of a loss confirms nothing.
	OwnNode string
	// FenceAfter is the fence bound (lease.go); DefaultFenceAfter when 0.
	FenceAfter time.Duration
	// RenewSilence is how long without a lease renewal makes a node silent
	// to the store, which a suspicion needs to become a loss (lease.go);
	// negative: renewals are not looked at (agents that renew none).
	RenewSilence time.Duration
	// DepartedRetention is how long the node list keeps a departed node
	// (leave.go); DepartedRetention by default.
	DepartedRetention time.Duration
	// Record, when set, is handed a command for the job history (package
	// jobhistory) when a job ends, under the store's lock: it must not wait.
	Record func(*musterv1.HistoryCommand)
	// Refused, when set, hears of every state change the store's tables do
	// not draw (lifecycle.go, rounds.go): a bug, which tests fail on.
	Refused func(error)
	// Applied, when set, hears of every command the store applied, in
	// order, under its lock (commands.go): it must not wait.
	Applied func(Command)
	// Recorder, when set, hears of the events metrics count (metrics.go).
	Recorder Recorder
	// Log, when set, replicates the store: every command goes through it,
	// and comes back through ApplyCommitted on every replica. The store
	// then acts (sends, arms timers, finds lost nodes) only between Lead
	// and StepDown (leader.go).
	Log Log
	// ID names the store; every replica of one store has the same. A new
	// one for each lone store when "".
	ID string
	// Clock is the store's clock; time.Now when nil.
	Clock func() time.Time
}

// Log is a replicated log of the store's commands.
type Log interface {
	// Propose appends c to the log and returns what applying it gave,
	// once it is applied here: ErrNotLeader where this store does not lead.
	Propose(c Command) (Result, error)
	// Leads says whether the log has this store lead now.
	Leads() bool
}

// Store holds the cluster's state in memory. All methods are safe for
// concurrent use.
type Store struct {
	cfg StoreConfig
	log *zap.Logger
	kv  kv.Store
	id  string // this incarnation of the store
	// began is when this incarnation started: its agents report their jobs
	// within the session grace of it (session.go).
	began time.Time

	mu      sync.Mutex
	nodes   map[string]*node // by session
	byName  map[string]*node // the same nodes by name
	jobs    map[string]*job
	order   []string          // job IDs in submission order
	rounds  map[string]*round // rounds not ended, by round ID
	waiting []*job            // jobs whose round waits for nodes, oldest first
	// liveness is what gossip says of nodes, by name (liveness.go).
	liveness map[string]Liveness
	// recheck looks at held suspicions again (lease.go).
	recheck *time.Timer
	// alone says the store last found itself cut off from many nodes;
	// rejoined is when that last ended (lease.go).
	alone    bool
	rejoined time.Time
	done     chan struct{} // closed by Close: ends watchSilence
	// departed are the nodes that left or died, by name (leave.go).
	departed map[string]*departure
	// schedule is the operator's cordons and drains, by node name
	// (schedule.go); a node without one takes every round.
	schedule map[string]musterv1.NodeSchedule
	// forgotten are jobs of an earlier incarnation the store told their
	// launcher it does not hold: a late report of one is refused.
	forgotten map[string]bool
	// timers are the job timers set and not yet fired (timers.go).
	timers map[timerKey]*jobTimer
	clock  func() time.Time
	// at is the applied command's time, zero between commands.
	at time.Time
	// leading says the store acts on what it applies: always for a lone
	// store; between Lead and StepDown for a replica. deposed is closed when
	// it stops leading.
	leading bool
	deposed chan struct{}
	closed  bool
	// jobsChanged is closed and replaced whenever a job's state, nodes or
	// round change: what WatchJobs waits on.
	jobsChanged chan struct{}
}

type node struct {
	session string
	info    *musterv1.Node
	out     *outbox
	gone    chan struct{}
	busy    map[int32]string // GPU index -> job ID
	jobs    map[string]bool
	// key is the secret of the agent that registered the node; it alone
	// may take the node back (see session.go).
	key string
	// connected is false from the end of the node's Watch stream until its
	// agent registers again; lost then fires after the session grace.
	connected bool
	lost      *time.Timer
	// seqs is, by job, the highest sequence number of the node's events
	// the store applied.
	seqs map[string]uint64
	// placeholder stands for a node of a job a restarted store took over,
	// until that node's agent registers again.
	placeholder bool
	// renewed is when the node's agent last renewed its lease; suspect is
	// what was said of its death, not yet taken as its loss (lease.go).
	renewed time.Time
	suspect *suspicion
	probed  time.Time // when peers were last asked to probe it
	probers int       // how many were asked then
	// leaving is set once its agent said it shuts down: no round takes it.
	leaving bool
	// health is its agent's last health check (health.go).
	health *musterv1.NodeHealth
}

// NewStore returns an empty store.
func NewStore(cfg StoreConfig) *Store {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.EventBytes == 0 {
		cfg.EventBytes = defaultEventBytes
	}
	if cfg.EventCount == 0 {
		cfg.EventCount = defaultEventCount
	}
	if cfg.SessionGrace == 0 {
		cfg.SessionGrace = defaultSessionGrace
	}
	if cfg.DetachGrace == 0 {
		cfg.DetachGrace = defaultDetachGrace
	}
	if cfg.FenceAfter == 0 {
		cfg.FenceAfter = DefaultFenceAfter
	}
	if cfg.RenewSilence == 0 {
		// No silence shorter than the node timeout ever fails a job,
		// whatever gossip said, nor one of a few renewals missed.
		cfg.RenewSilence = max(cfg.NodeTimeout, defaultRenewSilence)
	}
	if cfg.Recorder == nil {
		cfg.Recorder = noRecorder{}
	}
	if cfg.DepartedRetention == 0 {
		cfg.DepartedRetention = DepartedRetention
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	id := cfg.ID
	if id == "" {
		id = newID("st-")
	}
	s := &Store{cfg: cfg, log: cfg.Logger, kv: kv.NewMemory(), id: id, nodes: map[string]*node{}, timers: map[timerKey]*jobTimer{},
		leading: cfg.Log == nil, deposed: make(chan struct{}),
		byName: map[string]*node{}, jobs: map[string]*job{}, rounds: map[string]*round{},
		liveness: map[string]Liveness{}, departed: map[string]*departure{}, schedule: map[string]musterv1.NodeSchedule{}, forgotten: map[string]bool{},
		jobsChanged: make(chan struct{}),
		began:       cfg.Clock(), clock: cfg.Clock, done: make(chan struct{})}
	if cfg.NodeTimeout > 0 {
		go s.watchSilence()
	}
	return s
}

// Addr is the store's address as workers and other nodes reach it.
func (s *Store) Addr() string { return s.cfg.Addr }

// KV returns the jobs' key-value store.
func (s *Store) KV() kv.Store { return s.kv }

func newID(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Commands returns the session's unsent commands and a channel closed when
// the node is removed.
func (s *Store) Commands(session string) (*outbox, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[session]
	if n == nil {
		return nil, nil, fmt.Errorf("session %q: %w (register first)", session, ErrNotFound)
	}
	return n.out, n.gone, nil
}

// removeNodeLocked forgets a node, for loss, and ends or restarts its jobs.
func (s *Store) removeNodeLocked(n *node, loss *musterv1.NodeLoss) {
	delete(s.nodes, n.session)
	if n.lost != nil {
		n.lost.Stop()
	}
	if s.byName[n.info.GetName()] == n {
		delete(s.byName, n.info.GetName())
	}
	closeOnce(n.gone)
	// A node leaving between jobs is routine; leaving with jobs fails them.
	level := zap.InfoLevel
	if len(n.jobs) > 0 && !s.closed {
		level = zap.WarnLevel
	}
	s.log.Log(level, "node removed", zap.String("node", n.info.GetName()), zap.String("reason", failure.Cause(loss)),
		zap.String("observer", loss.GetObserver()))
	if s.closed {
		return // the jobs go on without this store
	}
	s.cfg.Recorder.NodeLost(loss)
	for _, id := range n.jobIDs() {
		if j := s.jobs[id]; j != nil && n.jobs[id] {
			s.nodeLostLocked(j, n, loss)
		}
	}
	// Waiting rounds report one node fewer.
	s.retryWaitingLocked()
}

// jobIDs lists n's jobs in a fixed order: what applying a command does to
// each must not follow Go's random map order, or replicas would differ.
func (n *node) jobIDs() []string { return slices.Sorted(maps.Keys(n.jobs)) }

// send queues a command for a node. Only a node that has left thousands of
// commands unread is removed, and only that node: no other node's queue
// fills on its account.
func (s *Store) sendLocked(n *node, cmd *musterv1.AgentCommand) {
	if !s.leading {
		return // the leader sends; a follower only keeps the table
	}
	if !n.out.push(cmd) {
		s.proposeLocked(&RemoveNode{Session: n.session, Loss: failure.Loss(n.info.GetName(), musterv1.LossSignal_LOSS_SIGNAL_UNREAD_COMMANDS, "", 0,
			fmt.Sprintf("%d commands", maxPending)), Renewed: n.renewed})
	}
}

// sortedNodes orders nodes as rounds rank them: explicit node rank first,
// then host name.
func sortedNodes(m map[string]*node) []*node {
	nodes := make([]*node, 0, len(m))
	for _, n := range m {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, compareNodes)
	return nodes
}

func compareNodes(a, b *node) int {
	ra, rb := a.info.GetRank(), b.info.GetRank()
	if (ra >= 0) != (rb >= 0) {
		if ra >= 0 {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(ra, rb); c != 0 {
		return c
	}
	return naturalCompare(a.info.GetName(), b.info.GetName())
}

// naturalCompare orders names as Slurm's host lists do: runs of digits by
// their value, so node2 comes before node10.
func naturalCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			da, db := strings.TrimLeft(a[si:i], "0"), strings.TrimLeft(b[sj:j], "0")
			if c := cmp.Compare(len(da), len(db)); c != 0 {
				return c
			}
			if c := cmp.Compare(da, db); c != 0 {
				return c
			}
			continue
		}
		if c := cmp.Compare(a[i], b[j]); c != 0 {
			return c
		}
		i, j = i+1, j+1
	}
	if c := cmp.Compare(len(a)-i, len(b)-j); c != 0 {
		return c
	}
	// Equal but for leading zeros (node01, node1): plain order decides.
	return cmp.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// Nodes lists the registered nodes.
func (s *Store) Nodes() []*musterv1.NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*musterv1.NodeStatus
	for _, n := range sortedNodes(s.nodes) {
		st := &musterv1.NodeStatus{Node: n.info, Leaving: n.leaving, Health: n.health, Schedule: s.schedule[n.info.GetName()]}
		for g := range n.busy {
			st.BusyGpus = append(st.BusyGpus, g)
		}
		for id := range n.jobs {
			st.Jobs = append(st.Jobs, id)
		}
		s.gossipStatusLocked(st)
		out = append(out, st)
	}
	s.pruneDepartedLocked()
	gossipOnly := s.gossipOnlyLocked()
	for _, st := range gossipOnly {
		st.Schedule = s.schedule[st.Node.Name]
	}
	gossipOnly = append(gossipOnly, s.scheduledOnlyLocked(append(out, gossipOnly...))...)
	slices.SortFunc(gossipOnly, func(a, b *musterv1.NodeStatus) int { return naturalCompare(a.Node.Name, b.Node.Name) })
	return append(out, gossipOnly...)
}

// Close removes every node, which ends their Watch streams, and ends every
// job's followers without a final event: a store that goes away does not end
// its jobs. Their agents keep them and register again with the store that
// comes back, which takes the jobs over; launchers follow them there.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	close(s.done)
	if s.recheck != nil {
		s.recheck.Stop()
	}
	for _, n := range s.nodes {
		s.removeNodeLocked(n, failure.Loss(n.info.GetName(), musterv1.LossSignal_LOSS_SIGNAL_STORE_CLOSING, "", 0, ""))
	}
	for _, tm := range s.timers {
		tm.disarmLocked()
	}
	for _, j := range s.jobs {
		if j.stdin != nil {
			j.stdin.close()
		}
		j.events.close()
	}
}
