// Package rendezvous is muster's store: it keeps the registered nodes, forms
// a round for each job (nodes, node ranks, GPUs, ports, the NCCL unique ID),
// pushes assignments to agents, collects job events, and serves KV and
// barriers to workers. Server exposes it over gRPC; Client talks to it.
package rendezvous

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

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
}

// Store holds the cluster's state in memory. All methods are safe for
// concurrent use.
type Store struct {
	cfg StoreConfig
	log *zap.Logger
	kv  *KV

	mu     sync.Mutex
	nodes  map[string]*node // by session
	byName map[string]*node // the same nodes by name
	jobs   map[string]*job
	order  []string // job IDs in submission order
	closed bool
}

type node struct {
	session string
	info    *musterv1.Node
	out     *outbox
	gone    chan struct{}
	busy    map[int32]string // GPU index -> job ID
	jobs    map[string]bool
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
	return &Store{cfg: cfg, log: cfg.Logger, kv: NewKV(), nodes: map[string]*node{}, byName: map[string]*node{}, jobs: map[string]*job{}}
}

// KV returns the store's key-value space.
func (s *Store) KV() *KV { return s.kv }

func newID(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Register adds a node, replacing an earlier registration of the same name,
// and returns the session its Watch stream must name.
func (s *Store) Register(info *musterv1.Node) (string, error) {
	if err := validateNode(info); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", fmt.Errorf("store is closing")
	}
	if n := s.byName[info.GetName()]; n != nil {
		s.removeNodeLocked(n, "registered again")
	}
	n := &node{
		session: newID("s-"),
		info:    info,
		out:     newOutbox(),
		gone:    make(chan struct{}),
		busy:    map[int32]string{},
		jobs:    map[string]bool{},
	}
	s.nodes[n.session] = n
	s.byName[info.GetName()] = n
	s.log.Info("node registered", zap.String("node", info.GetName()), zap.String("addr", info.GetAddr()),
		zap.Int("gpus", len(info.GetGpus())))
	return n.session, nil
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

// RemoveNode drops a node whose Watch stream ended; its jobs fail.
func (s *Store) RemoveNode(session, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nodes[session]; n != nil {
		s.removeNodeLocked(n, reason)
	}
}

func (s *Store) removeNodeLocked(n *node, reason string) {
	delete(s.nodes, n.session)
	if s.byName[n.info.GetName()] == n {
		delete(s.byName, n.info.GetName())
	}
	close(n.gone)
	// A node leaving between jobs is routine; leaving with jobs fails them.
	level := zap.InfoLevel
	if len(n.jobs) > 0 && !s.closed {
		level = zap.WarnLevel
	}
	s.log.Log(level, "node removed", zap.String("node", n.info.GetName()), zap.String("reason", reason))
	for id := range n.jobs {
		if j := s.jobs[id]; j != nil {
			s.nodeLostLocked(j, n, reason)
		}
	}
}

// send queues a command for a node. Only a node that has left thousands of
// commands unread is removed, and only that node: no other node's queue
// fills on its account.
func (s *Store) sendLocked(n *node, cmd *musterv1.AgentCommand) {
	if !n.out.push(cmd) {
		s.removeNodeLocked(n, fmt.Sprintf("%d commands unread", maxPending))
	}
}

// sortedNodes orders nodes as rounds rank them: explicit node rank first,
// then host name.
func sortedNodes(m map[string]*node) []*node {
	nodes := make([]*node, 0, len(m))
	for _, n := range m {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b *node) int {
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
		return cmp.Compare(a.info.GetName(), b.info.GetName())
	})
	return nodes
}

// Nodes lists the registered nodes.
func (s *Store) Nodes() []*musterv1.NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*musterv1.NodeStatus
	for _, n := range sortedNodes(s.nodes) {
		st := &musterv1.NodeStatus{Node: n.info}
		for g := range n.busy {
			st.BusyGpus = append(st.BusyGpus, g)
		}
		for id := range n.jobs {
			st.Jobs = append(st.Jobs, id)
		}
		out = append(out, st)
	}
	return out
}

// Close fails every unfinished job and removes every node, which ends their
// Watch streams.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, n := range s.nodes {
		s.removeNodeLocked(n, "store closing")
	}
	for _, j := range s.jobs {
		if !j.finished() {
			// A job cut short by the store's end did not succeed.
			if j.failure == nil && j.code == 0 {
				j.code = 1
				j.reason = "the store shut down before the job ended"
			}
			s.finishLocked(j)
		}
	}
}
