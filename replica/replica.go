// Package replica replicates a store (package rendezvous) on raft
// (hashicorp/raft, with its log and stable store in bbolt under the data
// directory): every replica applies the same commands in the same order,
// and the leader alone acts on them. Each replica is named by its store
// address; its raft traffic uses the port after that address's
// (transport.go).
package replica

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/security"
)

// Bounds on replication.
const (
	// MaxReplicas bounds a store's replicas: raft wants few voters.
	MaxReplicas = 7
	// applyTimeout bounds how long a command waits to be committed.
	applyTimeout = 10 * time.Second
	// leadBarrier bounds how long a new leader waits to apply what its
	// predecessor committed before it acts.
	leadBarrier = 10 * time.Second
)

// Config configures a Replica.
type Config struct {
	Logger *zap.Logger
	// Addr is this replica's store address as the others reach it
	// (host:port); its raft traffic uses the port after it.
	Addr string
	// BindHost is where raft listens; Addr's host when "".
	BindHost string
	// Peers are the store addresses of every replica, this one among them:
	// the same list on each. Used only to begin a new store; a replica
	// with state takes its configuration from its log.
	Peers []string
	// DataDir holds the raft log and snapshots (DataDir/raft).
	DataDir  string
	Security security.Security
	// HeartbeatTimeout is raft's heartbeat and election timeout; 1 s when 0.
	HeartbeatTimeout time.Duration
	// Joining says this replica is new to a running store: it begins
	// nothing and waits for the leader to add it (launcher stores add).
	Joining bool
	// Alone recovers a store that lost its quorum for good: this replica,
	// with the table it holds, becomes the store's only replica; the others
	// are added back with `launcher stores add`. Only ever on one replica.
	Alone bool
}

// Replica is one replica of a store: rendezvous.Log for its store.
type Replica struct {
	cfg   Config
	log   *zap.Logger
	raft  *raft.Raft
	store *rendezvous.Store
	bolt  *raftboltdb.BoltStore
	trans *raft.NetworkTransport
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// RaftAddr is the raft address of the replica whose store address is addr.
func RaftAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("replica address %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65534 {
		return "", fmt.Errorf("replica address %q: port must be 1 to 65534 (raft uses the next one)", addr)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// CheckPeers validates a replica list: host:port each, no repeats, at most
// MaxReplicas.
func CheckPeers(peers []string) error {
	if len(peers) > MaxReplicas {
		return fmt.Errorf("%d store replicas: at most %d", len(peers), MaxReplicas)
	}
	seen := map[string]bool{}
	for _, p := range peers {
		host, _, err := net.SplitHostPort(p)
		if err != nil || host == "" {
			return fmt.Errorf("store replica %q: want HOST:PORT", p)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("store replica %q: name an address the other replicas reach, not %s", p, host)
		}
		if _, err := RaftAddr(p); err != nil {
			return err
		}
		if seen[p] {
			return fmt.Errorf("store replica %q listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

// New checks cfg and returns a replica to hand its store, then Start.
func New(cfg Config) (*Replica, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.HeartbeatTimeout = cmp.Or(cfg.HeartbeatTimeout, time.Second)
	if err := CheckPeers(cfg.Peers); err != nil {
		return nil, err
	}
	if !slices.Contains(cfg.Peers, cfg.Addr) {
		return nil, fmt.Errorf("this replica's address %s is not among the store's replicas (%s): list it, as every replica lists all",
			cfg.Addr, strings.Join(cfg.Peers, ","))
	}
	if cfg.DataDir == "" {
		return nil, errors.New("a store replica needs a data directory for its log (--data-dir)")
	}
	return &Replica{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}, nil
}

// StoreID names the replicated store, the same on every replica, those
// added later too: derived from the cluster token, which they share.
func (r *Replica) StoreID() string {
	h := sha256.Sum256([]byte("muster store id\x00" + r.cfg.Security.Token))
	return "st-" + hex.EncodeToString(h[:6])
}

func loopbackOnly(peers []string) bool {
	for _, p := range peers {
		host, _, _ := net.SplitHostPort(p)
		if !security.IsLoopback(host) {
			return false
		}
	}
	return true
}

// Start opens the replica's log, joins raft with the other replicas
// (beginning the store when no replica has state), and hands store every
// committed command. The store acts while this replica leads.
func (r *Replica) Start(store *rendezvous.Store) error {
	r.store = store
	dir := filepath.Join(r.cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	raftAddr, _ := RaftAddr(r.cfg.Addr)
	host, port, _ := net.SplitHostPort(raftAddr)
	bind := net.JoinHostPort(cmp.Or(r.cfg.BindHost, host), port)
	layer, err := newStreamLayer(r.log, bind, r.cfg.Security, loopbackOnly(r.cfg.Peers))
	if err != nil {
		return err
	}
	r.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, MaxPool: 3,
		Timeout: 10 * time.Second, Logger: raftLogger(r.log, "raft-net"), ServerAddressProvider: addrProvider{}})
	ok := false
	defer func() {
		if !ok {
			r.trans.Close()
			if r.bolt != nil {
				r.bolt.Close()
			}
		}
	}()
	if r.bolt, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")}); err != nil {
		return fmt.Errorf("replica: raft log in %s: %w", dir, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, raftLogger(r.log, "raft-snap"))
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	logs, err := raft.NewLogCache(512, r.bolt)
	if err != nil {
		return err
	}
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(r.cfg.Addr)
	conf.HeartbeatTimeout = r.cfg.HeartbeatTimeout
	conf.ElectionTimeout = r.cfg.HeartbeatTimeout
	// A leader cut off steps down within the lease, before the others
	// elect another (after at least HeartbeatTimeout): it acknowledges no
	// lease renewal once another leads (rendezvous/leader.go).
	conf.LeaderLeaseTimeout = r.cfg.HeartbeatTimeout
	conf.Logger = raftLogger(r.log, "raft")
	if !canSnapshot(store) {
		// Without snapshots the log is kept whole.
		conf.SnapshotThreshold = 1 << 62
		conf.SnapshotInterval = 1<<63 - 1
	}
	has, err := raft.HasExistingState(logs, r.bolt, snaps)
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	if r.cfg.Alone {
		if !has {
			return fmt.Errorf("replica: nothing to recover in %s: the store's table is where a replica ran before", dir)
		}
		self := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(r.cfg.Addr), Address: raft.ServerAddress(raftAddr)}}}
		if err := raft.RecoverCluster(conf, &fsm{store: store, log: r.log}, logs, r.bolt, snaps, r.trans, self); err != nil {
			return fmt.Errorf("replica: recover the store alone: %w", err)
		}
		r.log.Warn("store recovered on this replica alone: add the others back with launcher stores add", zap.String("addr", r.cfg.Addr))
	}
	if !has && !r.cfg.Joining {
		var servers []raft.Server
		for _, p := range r.cfg.Peers {
			ra, _ := RaftAddr(p)
			servers = append(servers, raft.Server{ID: raft.ServerID(p), Address: raft.ServerAddress(ra)})
		}
		if err := raft.BootstrapCluster(conf, logs, r.bolt, snaps, r.trans, raft.Configuration{Servers: servers}); err != nil {
			return fmt.Errorf("replica: begin the store: %w", err)
		}
		r.log.Info("store replicas begun", zap.Strings("replicas", r.cfg.Peers))
	}
	if r.raft, err = raft.NewRaft(conf, &fsm{store: store, log: r.log}, logs, r.bolt, snaps, r.trans); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	ok = true
	r.wg.Add(1)
	go r.watchLeadership()
	r.log.Info("store replica started", zap.String("addr", r.cfg.Addr), zap.String("raft", raftAddr), zap.Bool("state", has))
	return nil
}

// addrProvider finds a replica's raft address from its ID, its store
// address: a replica added later needs no other bookkeeping.
type addrProvider struct{}

func (addrProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	a, err := RaftAddr(string(id))
	return raft.ServerAddress(a), err
}

// watchLeadership has the store lead while this replica does, once it has
// applied everything its predecessor committed.
func (r *Replica) watchLeadership() {
	defer r.wg.Done()
	for {
		select {
		case <-r.done:
			return
		case leader := <-r.raft.LeaderCh():
			if !leader {
				r.store.StepDown()
				continue
			}
			if err := r.raft.Barrier(leadBarrier).Error(); err != nil {
				r.log.Warn("new leader could not catch up; it does not lead", zap.Error(err))
				continue
			}
			if r.raft.State() == raft.Leader {
				r.store.Lead()
			}
		}
	}
}

// Leads says whether raft has this replica lead now.
func (r *Replica) Leads() bool { return r.raft.State() == raft.Leader }

// Propose replicates c and returns what applying it gave here.
//
// Until its store leads (it has applied what its predecessor committed) a
// new leader takes no command: one applied before would lose its effects.
func (r *Replica) Propose(c rendezvous.Command) (rendezvous.Result, error) {
	if r.raft.State() != raft.Leader || !r.store.Leading() {
		return rendezvous.Result{}, r.notLeader()
	}
	b, err := rendezvous.MarshalCommand(c)
	if err != nil {
		return rendezvous.Result{}, err
	}
	f := r.raft.Apply(b, applyTimeout)
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return rendezvous.Result{}, r.notLeader()
		case errors.Is(err, raft.ErrLeadershipLost):
			return rendezvous.Result{}, fmt.Errorf("%w: the leader changed before the command was known to be applied: it may or may not have been", rendezvous.ErrUnknownOutcome)
		}
		return rendezvous.Result{}, fmt.Errorf("store replicas: %w", err)
	}
	a, _ := f.Response().(applied)
	return a.res, a.err
}

// notLeader says where the leader is, as far as this replica knows.
func (r *Replica) notLeader() error {
	if l := r.LeaderAddr(); l != "" {
		return &rendezvous.NotLeaderError{Leader: l}
	}
	return &rendezvous.NotLeaderError{}
}

// LeaderAddr is the leader's store address; "" while there is none, or
// while this replica, elected, has yet to catch up and lead its store.
func (r *Replica) LeaderAddr() string {
	_, id := r.raft.LeaderWithID()
	if string(id) == r.cfg.Addr && (r.store == nil || !r.store.Leading()) {
		return ""
	}
	return string(id)
}

// Replicas are the store addresses of the configuration's replicas.
func (r *Replica) Replicas() []string {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return slices.Clone(r.cfg.Peers)
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		out = append(out, string(s.ID))
	}
	slices.Sort(out)
	return out
}

// Status is this replica's own account of itself.
func (r *Replica) Status(node string) *musterv1.ReplicaStatusResponse {
	st := r.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	raftAddr, _ := RaftAddr(r.cfg.Addr)
	out := &musterv1.ReplicaStatusResponse{Addr: r.cfg.Addr, RaftAddr: raftAddr, Node: node, Term: num("term"),
		AppliedIndex: num("applied_index"), CommitIndex: num("commit_index"), LeaderAddr: r.LeaderAddr(), Replicas: r.Replicas()}
	switch r.raft.State() {
	case raft.Leader:
		out.Role = musterv1.ReplicaRole_REPLICA_ROLE_LEADER
		out.LastContactUnixMs = time.Now().UnixMilli()
	case raft.Follower:
		out.Role = musterv1.ReplicaRole_REPLICA_ROLE_FOLLOWER
	case raft.Candidate:
		out.Role = musterv1.ReplicaRole_REPLICA_ROLE_CANDIDATE
	default:
		out.Role = musterv1.ReplicaRole_REPLICA_ROLE_SHUTDOWN
	}
	if out.Role != musterv1.ReplicaRole_REPLICA_ROLE_LEADER {
		if t := r.raft.LastContact(); !t.IsZero() {
			out.LastContactUnixMs = t.UnixMilli()
		}
	}
	return out
}

// Change adds the replica at addr (store address) as a voter, or removes
// it; only the leader does. It returns the replicas after the change.
func (r *Replica) Change(addr string, remove bool) ([]string, error) {
	if r.raft.State() != raft.Leader {
		return nil, r.notLeader()
	}
	if err := CheckPeers([]string{addr}); err != nil {
		return nil, err
	}
	var f raft.IndexFuture
	if remove {
		f = r.raft.RemoveServer(raft.ServerID(addr), 0, applyTimeout)
	} else {
		if len(r.Replicas()) >= MaxReplicas {
			return nil, fmt.Errorf("the store has %d replicas already, the most it takes", MaxReplicas)
		}
		ra, _ := RaftAddr(addr)
		f = r.raft.AddVoter(raft.ServerID(addr), raft.ServerAddress(ra), 0, applyTimeout)
	}
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("store replicas: %w", err)
	}
	return r.Replicas(), nil
}

// Close leaves raft's work undone, in order: (1) the leadership watch
// ends; (2) raft shuts down, for at most its own bound; (3) the transport
// and the log close. It does not remove the replica from the store's
// configuration: a replica that is closed is one that is down.
func (r *Replica) Close() error {
	var err error
	r.once.Do(func() {
		close(r.done)
		if r.raft != nil {
			err = r.raft.Shutdown().Error()
		}
		r.wg.Wait()
		if r.trans != nil {
			r.trans.Close()
		}
		if r.bolt != nil {
			err = errors.Join(err, r.bolt.Close())
		}
	})
	return err
}
