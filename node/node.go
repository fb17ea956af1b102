// Package node composes one machine's muster, as etcd's embed does: the
// store when this node hosts it, and the agent that runs this node's
// workers. The agent daemon and the container entrypoint start their node
// here, so hosting or joining a store is written once; the launcher's
// private node on a socket is package embedded.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/jobhistory"
	"github.com/musterhq/muster/metrics"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storeserver"
)

// Config configures a Node.
type Config struct {
	Logger *zap.Logger
	// Listen hosts the store on this TCP HOST:PORT (a host name resolves,
	// preferring IPv4; an empty host listens on every address).
	Listen string
	// Socket, with Listen, also serves the store on this Unix socket for
	// launchers on this machine. SocketRequired fails the node
	// when it cannot be served; otherwise the store goes on without it.
	Socket         string
	SocketRequired bool
	// SocketUsers lets every local user submit on the socket; their jobs
	// run as them. Otherwise only this user and root may.
	SocketUsers bool
	// Join is the address of a store to join instead of hosting one. With
	// Gossip and neither Listen nor Join, the store is found through gossip.
	Join string
	// JoinReplicas, with Join, are a replicated store's replicas (Join
	// among them): the agent follows their leader.
	JoinReplicas []string
	// StorePeers, with Listen, makes the hosted store one replica of a
	// replicated store: every replica's store address, Listen's among them,
	// the same list on each (package replica). Its raft log lives in
	// History.Dir.
	StorePeers []string
	// StoreJoining and StoreAlone: see replica.Config's Joining, Alone.
	StoreJoining, StoreAlone bool
	// Gossip, when set, makes the node a gossip member (nil: none).
	Gossip *Gossip
	// Security is the store's (hosting) or the way to reach it (joining).
	Security security.Security
	// TokenFile holds the cluster token when Security gives none and
	// MUSTER_TOKEN is unset; a node hosting the store makes it when missing.
	TokenFile string
	// History is the hosted store's job history: where its file lives and
	// its bounds (see storeserver.Config).
	History jobhistory.Config
	// Agent is this node's agent; Start fills in how it reaches the store.
	Agent agent.Config
	// GPUsExpected says why the node should offer GPUs ("--gpus 8",
	// "/dev/nvidia0 exists"), "" on a CPU node: only a node that expected
	// GPUs and found none is not ready.
	GPUsExpected string
	// MetricsAddr, when set, serves the node's metrics and probes on this
	// TCP HOST:PORT (package metrics): the store's too when it hosts it.
	MetricsAddr string
}

// Node is a running store, when hosted, and agent.
type Node struct {
	log   *zap.Logger
	store *storeserver.Server
	agent *agent.Agent

	gossip     *cluster.Cluster // nil without gossip
	gossipDone chan struct{}    // closed when watchGossip ends
	gpus       int              // GPUs the node offers
	gpusWhy    string           // Config.GPUsExpected
	errc       chan error       // see Err
	storeDone  chan struct{}    // closed when watchStore ends; nil while it has not begun
	// warnedStores are the other store hosts watchGossip warned of (stores.go).
	warnedStores map[string]bool
	// replicas are the hosted store's replicas, when it is replicated.
	replicas    []string
	nodeTimeout time.Duration            // gossip's node timeout, gossiped in the metadata
	timeouts    map[string]time.Duration // the node timeout each node last gossiped; watchGossip's
	metrics     *nodeMetrics             // nil without Config.MetricsAddr (metrics.go)
	gossipPeers int                      // how many peers gossip was given to join

	closeOnce sync.Once
	closeErr  error // Close's
}

// listenAt is where a node hosting the store listens, as Resolve found it.
type listenAt struct {
	ip   netip.Addr
	addr string // ip:port
}

// Start starts the gossip member, if any, hosts the store, joins it or finds
// it through gossip, then starts the agent. The node takes jobs once Start
// returns; Err says when its store fails later. ctx bounds the start only.
// A failed Start undoes what it made.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	at, peers, err := cfg.resolve(ctx)
	if err != nil {
		return nil, err
	}
	n := &Node{log: cfg.Logger, gpus: len(cfg.Agent.GPUs), gpusWhy: cfg.GPUsExpected, errc: make(chan error, 1), replicas: cfg.StorePeers}
	defer func() {
		if err != nil {
			n.undoStart()
		}
	}()
	acfg := cfg.Agent
	acfg.Logger = cfg.Logger
	if acfg.Name == "" {
		acfg.Name, _ = os.Hostname()
	}
	if err := n.startMetrics(cfg); err != nil {
		return nil, err
	}
	if cfg.Gossip != nil {
		if err := n.startGossipFirst(ctx, &cfg, &acfg); err != nil {
			return nil, err
		}
		n.gossipPeers = len(peers)
	}
	if err := n.startStoreAndAgent(ctx, cfg, acfg, at, peers); err != nil {
		return nil, err
	}
	if n.gossip != nil {
		storeAddr := ""
		if n.store != nil {
			storeAddr = n.store.AdvertiseAddr()
		}
		n.gossipDone = make(chan struct{})
		go n.watchGossip(storeAddr)
		if n.store == nil {
			go n.followStore()
		}
	}
	if n.store != nil {
		n.storeDone = make(chan struct{})
		go n.watchStore()
	}
	n.metricsStarted()
	return n, nil
}

// undoStart closes what a failed Start made: the store, the gossip member
// and the metrics server. The agent, started last, is never among them.
func (n *Node) undoStart() {
	if n.store != nil {
		n.store.Close()
	}
	if n.gossip != nil {
		n.gossip.Close()
	}
	n.closeMetrics()
}

// watchStore passes on the first error that stopped the hosted store serving
// a listener: its nodes and launchers can no longer reach it there. It closes
// Err once the store has stopped serving.
func (n *Node) watchStore() {
	defer close(n.storeDone)
	defer close(n.errc)
	for err := range n.store.Err() {
		n.log.Error("the store failed", zap.Error(err))
		select {
		case n.errc <- err:
		default:
		}
	}
}

// CheckHostOrJoin refuses a node told both to host a store and to join one.
func CheckHostOrJoin(listen, join string) error {
	if listen != "" && join != "" {
		return errors.New("--listen and --store: give one (host the store, or join one)")
	}
	return nil
}

// Resolve checks what the node is to host or join and fills in its cluster
// token (Security.Token), making the token file of a node that hosts the
// store when it has none. Start resolves cfg itself; a caller resolves it
// first to fail before it says the node is starting.
func (cfg *Config) Resolve(ctx context.Context) error {
	_, _, err := cfg.resolve(ctx)
	return err
}

// resolve is Resolve, with where the store is to listen and the gossip
// peers to join.
func (cfg *Config) resolve(ctx context.Context) (listenAt, []string, error) {
	var at listenAt
	if err := CheckHostOrJoin(cfg.Listen, cfg.Join); err != nil {
		return at, nil, err
	}
	var peers []string
	if cfg.Gossip != nil {
		var err error
		if peers, err = JoinAddrs(cfg.Gossip.Join); err != nil {
			return at, nil, err
		}
	}
	switch {
	case cfg.Listen == "" && cfg.Join == "" && cfg.Gossip == nil:
		return at, nil, errors.New("neither a store to host nor one to join")
	case cfg.Listen == "" && cfg.Join == "" && len(peers) == 0:
		return at, nil, errors.New("gossip without peers, a store to host or a store to join: give --join, --listen or --store")
	}
	if err := cfg.givenToken(); err != nil {
		return at, nil, err
	}
	if cfg.Listen != "" {
		// Refused before a token is made for it.
		ip, port, err := resolveListen(ctx, cfg.Listen)
		if err != nil {
			return at, nil, err
		}
		at = listenAt{ip: ip, addr: net.JoinHostPort(ip.String(), port)}
		if err := security.CheckListen(at.addr, cfg.Security); err != nil {
			return at, nil, err
		}
		if len(cfg.StorePeers) > 0 {
			if err := checkReplica(at.addr, cfg); err != nil {
				return at, nil, err
			}
		}
	}
	return at, peers, cfg.foundToken()
}

// givenToken fills in the cluster token given explicitly: Security.Token,
// else MUSTER_TOKEN, else the token file, unless it is one this node, hosting
// the store, has yet to make.
func (cfg *Config) givenToken() error {
	if cfg.Security.Token != "" {
		return nil
	}
	file := cfg.TokenFile
	if cfg.Listen != "" && !fileExists(file) {
		file = ""
	}
	var err error
	cfg.Security.Token, _, err = security.ResolveToken(security.TokenSource{File: file})
	return err
}

// foundToken fills in the cluster token none gave: a node hosting the store
// makes the token file (by default the user's or the system's); a node
// joining one finds it in the usual places, needing none for a store on a
// Unix socket unless it gossips, which derives its key from the token.
func (cfg *Config) foundToken() error {
	if cfg.Security.Token != "" {
		return nil
	}
	if cfg.Listen != "" {
		tok, err := hostToken(cfg.Logger, cfg.TokenFile)
		cfg.Security.Token = tok
		return err
	}
	if cfg.Gossip == nil && security.IsUnixAddr(security.NormalizeAddr(cfg.Join)) {
		return nil
	}
	var err error
	cfg.Security.Token, _, err = security.ResolveToken(security.TokenSource{File: cfg.TokenFile, Find: true})
	if err == nil && cfg.Security.Token == "" && cfg.Gossip != nil {
		err = errors.New("gossip needs the cluster token: set MUSTER_TOKEN or --token-file (copy the store's token file to this node)")
	}
	return err
}

// hostToken is the token of a node hosting the store: the one in file (by
// default the user's or the system's), made when missing.
func hostToken(log *zap.Logger, file string) (string, error) {
	if file == "" {
		file = security.DefaultTokenFile()
	}
	tok, created, err := security.ResolveToken(security.TokenSource{File: file, Create: true})
	if err == nil && log != nil {
		log.Info("cluster token", zap.String("file", file), zap.Bool("created", created))
	}
	return tok, err
}

// startGossipFirst starts the node's member before the store and the agent:
// its key derives from the cluster token, and the agent's address defaults
// to the gossip address.
func (n *Node) startGossipFirst(ctx context.Context, cfg *Config, acfg *agent.Config) error {
	hint := acfg.Addr
	if host, _, err := net.SplitHostPort(cfg.Listen); hint == "" && err == nil {
		if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() && !ip.IsLoopback() {
			hint = host // the store's address is this node's
		}
	}
	if err := n.startGossip(ctx, cfg.Gossip, acfg.Name, cfg.Security.Token, hint); err != nil {
		return err
	}
	if acfg.Addr == "" {
		// Workers reach this node where other nodes gossip with it.
		acfg.Addr, _, _ = net.SplitHostPort(n.gossip.Addr())
	}
	return nil
}

// startStoreAndAgent hosts, joins or finds the store, then starts the agent.
func (n *Node) startStoreAndAgent(ctx context.Context, cfg Config, acfg agent.Config, at listenAt, peers []string) error {
	if cfg.Listen != "" {
		if err := n.host(ctx, &cfg, &acfg, at); err != nil {
			return err
		}
		if n.gossip != nil {
			n.setMeta(n.gpus, n.gpus, n.store.AdvertiseAddr(), true)
			if err := n.joinGossip(peers); err != nil {
				return err
			}
			if err := n.claimStore(ctx, cfg.StorePeers); err != nil {
				// Left, not dead: the others free its name at once for the node's next
				// start, whatever address that advertises, and suspect nothing; a store
				// this one yielded to stops waiting for it.
				n.gossip.Leave(gossipLeaveTimeout)
				return err
			}
			n.setMeta(n.gpus, n.gpus, n.store.AdvertiseAddr(), false)
		}
	} else if err := n.join(ctx, cfg, &acfg, peers); err != nil {
		return err
	}
	a, err := agent.Start(ctx, acfg)
	if err != nil {
		return err
	}
	n.agent = a
	return nil
}

// join finds the store through gossip, when not given, and tells the agent
// how to reach it.
func (n *Node) join(ctx context.Context, cfg Config, acfg *agent.Config, peers []string) error {
	if n.gossip != nil {
		n.setMeta(n.gpus, n.gpus, "", false)
		if err := n.joinGossip(peers); err != nil {
			return err
		}
	}
	join := cfg.Join
	if join == "" {
		var err error
		if join, err = n.discoverStore(ctx, peers); err != nil {
			return err
		}
	}
	acfg.StoreAddr = security.NormalizeAddr(join)
	acfg.StoreReplicas = cfg.JoinReplicas
	acfg.Security = security.Security{Token: cfg.Security.Token, CAFile: cfg.Security.CAFile}
	if host, _, err := net.SplitHostPort(acfg.StoreAddr); err == nil && cfg.Join == "" && !security.IsLoopback(host) {
		// A store found through gossip on another host serves TLS.
		acfg.Security.TLS = true
	}
	if acfg.StoreCA == "" {
		acfg.StoreCA = cfg.Security.CAFile
	}
	if acfg.Addr == "" {
		acfg.Addr = "127.0.0.1"
	}
	return nil
}

// host starts the store where resolve said (and on its socket), with the
// cluster token resolve found or made: every call over TCP needs one,
// loopback too.
func (n *Node) host(ctx context.Context, cfg *Config, acfg *agent.Config, at listenAt) error {
	sec, ip, listenAddr := cfg.Security, at.ip, at.addr
	if acfg.Addr == "" {
		acfg.Addr = "127.0.0.1"
		if !ip.IsUnspecified() {
			acfg.Addr = ip.String()
		}
	}
	configure := func(c *storeserver.Config) {
		c.Replicas, c.ReplicaDir = cfg.StorePeers, cfg.History.Dir
		c.OwnNode = acfg.Name
		c.ReplicaJoining, c.ReplicaAlone = cfg.StoreJoining, cfg.StoreAlone
		if n.gossip != nil {
			c.AgentGone, c.NodeTimeout, c.OwnNode = n.gossip.ProcessGone, n.nodeTimeout, acfg.Name
		}
		if n.metrics != nil {
			// Only the node hosting the store counts its events.
			if n.metrics.store == nil {
				n.metrics.store = metrics.NewStoreRecorder(n.metrics.reg)
			}
			c.Recorder = n.metrics.store
		}
	}
	store, err := hostStore(ctx, n.log, cfg, listenAddr, acfg.Addr, sec, configure)
	if err != nil {
		return err
	}
	n.store = store
	if acfg.StoreCA == "" {
		acfg.StoreCA = sec.CAFile
		if sec.CertFile != "" && acfg.StoreCA == "" {
			acfg.StoreCA = sec.CertFile // workers trust the store's own certificate
		}
	}
	if len(cfg.StorePeers) > 0 {
		// The agent follows the replicas' leader, over TCP as other nodes do.
		acfg.StoreAddr, acfg.StoreReplicas = listenAddr, cfg.StorePeers
		acfg.Security = security.Security{Token: sec.Token, TLS: sec.CertFile != "", CAFile: acfg.StoreCA}
		return nil
	}
	if acfg.StoreAddr = store.SocketAddr(); acfg.StoreAddr == "" {
		// No socket: dial the store over loopback, with the token (and TLS,
		// trusting the store's CA or its certificate).
		_, port, _ := net.SplitHostPort(store.Addr())
		host := ip.String()
		if ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		acfg.StoreAddr = net.JoinHostPort(host, port)
		acfg.Security = security.Security{Token: sec.Token, TLS: sec.CertFile != "", CAFile: acfg.StoreCA}
	}
	return nil
}

// hostStore starts the store on listenAddr and on the socket. When the
// socket cannot be served (another agent holds it) and was not asked for
// by name, the store goes on without one.
func hostStore(ctx context.Context, log *zap.Logger, cfg *Config, listenAddr, nodeAddr string, sec security.Security,
	configure func(*storeserver.Config)) (*storeserver.Server, error) {
	lis, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("store: listen on %s: %w", listenAddr, err)
	}
	advertise := lis.Addr().String()
	host, port, _ := net.SplitHostPort(advertise)
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		// Workers reach the store at this node's address.
		advertise = net.JoinHostPort(nodeAddr, port)
	}
	rcfg := storeserver.Config{Logger: log, Listener: lis, AdvertiseAddr: advertise, Security: sec,
		Socket: cfg.Socket, SocketUsers: cfg.SocketUsers, History: cfg.History}
	configure(&rcfg)
	if rcfg.Socket == "" {
		rcfg.Socket = security.DefaultSocket()
	}
	store, err := storeserver.Start(ctx, rcfg)
	if err != nil && !cfg.SocketRequired {
		log.Warn("serving no socket for local launchers", zap.String("socket", rcfg.Socket), zap.Error(err))
		// A failed start leaves the listener to this node: the store starts
		// on it again, with no port given up meanwhile for another to take.
		rcfg.Socket = ""
		store, err = storeserver.Start(ctx, rcfg)
	}
	if err != nil {
		lis.Close()
	}
	return store, err
}

// resolveListen turns HOST:PORT into an IP address, resolving a host name
// (localhost) and preferring IPv4. An empty host listens on every address.
func resolveListen(ctx context.Context, listen string) (netip.Addr, string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return netip.Addr{}, "", fmt.Errorf("--listen %q: want HOST:PORT: %w", listen, err)
	}
	if host == "" {
		return netip.IPv4Unspecified(), port, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, port, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, "", fmt.Errorf("--listen %q: cannot resolve %s: %v", listen, host, err)
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap(), port, nil
		}
	}
	return ips[0], port, nil
}

// Store is the store this node hosts, or nil when it joined one.
func (n *Node) Store() *storeserver.Server { return n.store }

// Agent is this node's agent.
func (n *Node) Agent() *agent.Agent { return n.agent }

// Err delivers why the store this node hosts stopped serving, which ends
// the node's use: nothing comes on it when the node joined a store, whose
// loss its agent rides out. It is closed once the node is over: Close has
// stopped it (and its store, if any, has stopped serving); a receive then
// gives nil.
func (n *Node) Err() <-chan error { return n.errc }

// gossipLeaveTimeout bounds how long Close waits for its leave to be gossiped.
const gossipLeaveTimeout = time.Second

// storeStopWait bounds how long Close waits, once the store has closed, for
// its serving goroutines to end and Err to close.
const storeStopWait = time.Second

// Close stops the node, in order: (1) the agent stops its jobs, which fail
// naming this node, and delivers their last events to the store, within
// grace and its own bounds (agent.Agent.Close); (2) the gossip member
// leaves, so the others see it left rather than dead, within
// gossipLeaveTimeout, and its watcher ends, waited for as long again; (3)
// the hosted store, if any, closes within its ShutdownTimeout, and Err is
// closed, within storeStopWait. Calling it again does nothing more and
// returns the first call's error.
func (n *Node) Close(grace time.Duration) error {
	n.closeOnce.Do(func() { n.closeErr = n.close(grace) })
	return n.closeErr
}

func (n *Node) close(grace time.Duration) error {
	err := n.agent.Close(grace)
	if n.gossip != nil {
		if lerr := n.gossip.Leave(gossipLeaveTimeout); lerr != nil {
			n.log.Debug("gossip leave", zap.Error(lerr))
		}
		select {
		case <-n.gossipDone:
		case <-time.After(gossipLeaveTimeout):
			n.log.Warn("gossip watcher still running after leave")
		}
	}
	if n.store != nil {
		n.store.Close()
		select {
		case <-n.storeDone:
		case <-time.After(storeStopWait):
			n.log.Warn("the store still serving after its close")
		}
	} else {
		close(n.errc)
	}
	n.closeMetrics()
	return err
}

// Gossip is the node's gossip member, or nil.
func (n *Node) Gossip() *cluster.Cluster { return n.gossip }

// fileExists reports whether path names something that exists.
func fileExists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}

// checkReplica refuses a replica the others could not reach or trust: its
// listen address must be its entry in the replica list, and off loopback
// its clients verify every replica's certificate with the CA file.
func checkReplica(listenAddr string, cfg *Config) error {
	if !slices.Contains(cfg.StorePeers, listenAddr) {
		return fmt.Errorf("--listen %s is not among --store-peers (%s): give --listen as the list names this replica",
			listenAddr, strings.Join(cfg.StorePeers, ","))
	}
	if cfg.History.Dir == "" {
		return errors.New("a store replica keeps its log on disk: give --data-dir")
	}
	if cfg.Security.CertFile != "" && cfg.Security.CAFile == "" {
		return errors.New("store replicas with TLS need --tls-ca: every node verifies each replica's certificate with the cluster's CA")
	}
	return nil
}
