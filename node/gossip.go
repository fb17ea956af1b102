package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/cluster"
	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/version"
)

// DefaultGossipPort is the gossip port when an address gives none, serf's.
const DefaultGossipPort = 7946

// Gossip configures the node's gossip member (cluster/).
type Gossip struct {
	// Bind is IP[:PORT] to listen on, UDP and TCP; "" is 0.0.0.0:7946.
	Bind string
	// Advertise is IP[:PORT] other nodes reach this one on; "" is the bind
	// IP when specific, else the agent's address, else one memberlist picks.
	Advertise string
	// Join are peers, HOST[:PORT]; joined again periodically, so a healed
	// partition merges.
	Join    []string
	Profile cluster.Profile
	// NodeTimeout is how long a node may be silent before gossip declares it dead
	// (--node-timeout); 0 is the profile's. Every node should have the same: each
	// gossips its own, and a node that sees another value logs it.
	NodeTimeout time.Duration
}

// gossipMetaTimeout bounds how long a metadata change waits to be sent.
const gossipMetaTimeout = 2 * time.Second

// discoverEvery is how often a node looking for its store through gossip
// joins its peers again and says it is still waiting.
const discoverEvery = 5 * time.Second

// splitHostPortDefault splits HOST[:PORT], with port def when none is given.
func splitHostPortDefault(addr string, def int) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		// No port: a bare host or IP (an IPv6 one without brackets too).
		if _, perr := netip.ParseAddr(addr); perr == nil || !strings.Contains(addr, ":") {
			return addr, def, nil
		}
		return "", 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", portText)
	}
	return host, port, nil
}

// JoinAddrs normalises peers to HOST:PORT, the gossip port by default.
func JoinAddrs(peers []string) ([]string, error) {
	var out []string
	for _, p := range peers {
		if p == "" {
			continue
		}
		host, port, err := splitHostPortDefault(p, DefaultGossipPort)
		switch {
		case strings.ContainsAny(p, "/@ "):
			return nil, fmt.Errorf("--join %q: want HOST or HOST:PORT", p)
		case err != nil:
			return nil, fmt.Errorf("--join %q: %v", p, err)
		case host == "":
			return nil, fmt.Errorf("--join %q: want HOST or HOST:PORT", p)
		}
		out = append(out, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return out, nil
}

// Check says what is wrong with the gossip flags, naming the flag.
func (g *Gossip) Check() error {
	if _, err := JoinAddrs(g.Join); err != nil {
		return err
	}
	_, err := g.clusterConfig(nil, "check", "check", "")
	return err
}

// clusterConfig builds the member's config. addr is the agent's address,
// when known: the advertise address when neither --advertise nor a specific
// --bind says otherwise.
func (g *Gossip) clusterConfig(log *zap.Logger, name, token, addr string) (cluster.Config, error) {
	cfg := cluster.Config{Name: name, Token: token, Profile: g.Profile, NodeTimeout: g.NodeTimeout, Logger: log, BindPort: DefaultGossipPort}
	if g.NodeTimeout != 0 {
		if err := cluster.CheckNodeTimeout(g.NodeTimeout); err != nil {
			return cfg, fmt.Errorf("--node-timeout %s: want %s to %s", g.NodeTimeout, cluster.MinNodeTimeout, cluster.MaxNodeTimeout)
		}
	}
	if g.Bind != "" {
		host, port, err := splitHostPortDefault(g.Bind, DefaultGossipPort)
		if err != nil {
			return cfg, fmt.Errorf("--bind %q: want IP or IP:PORT: %v", g.Bind, err)
		}
		if _, err := netip.ParseAddr(host); host != "" && err != nil {
			return cfg, fmt.Errorf("--bind %q: %s is not an IP address", g.Bind, host)
		}
		cfg.BindAddr, cfg.BindPort = host, port
	}
	switch {
	case g.Advertise != "":
		host, port, err := splitHostPortDefault(g.Advertise, 0)
		if err != nil {
			return cfg, fmt.Errorf("--advertise %q: want IP or IP:PORT: %v", g.Advertise, err)
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return cfg, fmt.Errorf("--advertise %q: %s is not an IP address", g.Advertise, host)
		}
		if ip.IsUnspecified() {
			return cfg, fmt.Errorf("--advertise %q: other nodes cannot reach an unspecified address; give this node's IP", g.Advertise)
		}
		cfg.AdvertiseAddr, cfg.AdvertisePort = host, port
	case cfg.BindAddr != "" && cfg.BindAddr != "0.0.0.0" && cfg.BindAddr != "::":
	case addr != "":
		cfg.AdvertiseAddr = addr
	}
	return cfg, nil
}

// startGossip starts the node's member, not yet joined.
func (n *Node) startGossip(ctx context.Context, g *Gossip, name, token, addr string) error {
	ccfg, err := g.clusterConfig(n.log, name, token, addr)
	if err != nil {
		return err
	}
	n.nodeTimeout = g.NodeTimeout
	if n.nodeTimeout == 0 {
		n.nodeTimeout = cluster.DefaultNodeTimeout
		if g.Profile == cluster.Local {
			n.nodeTimeout = cluster.LocalNodeTimeout
		}
	}
	n.timeouts = map[string]time.Duration{}
	ccfg.Meta = cluster.Meta{Version: version.Short(), NodeTimeout: n.nodeTimeout}
	if n.metrics != nil {
		ccfg.MetricSink = n.metrics.gossip
	}
	c, err := cluster.Start(ctx, ccfg)
	// memberlist words its listener's error with %v, which drops the errno.
	if errors.Is(err, syscall.EADDRINUSE) || err != nil && strings.Contains(err.Error(), "address already in use") {
		return fmt.Errorf("gossip port %s is in use (another agent on this machine?): stop it, or give this agent --bind IP:PORT with a free port",
			net.JoinHostPort(cmp.Or(ccfg.BindAddr, "0.0.0.0"), strconv.Itoa(ccfg.BindPort)))
	}
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	n.gossip = c
	return nil
}

// joinGossip joins the peers. A node that needs its store from gossip
// waits for it in discoverStore; the others go on when no peer answers
// yet: the rejoin loop tries again.
func (n *Node) joinGossip(peers []string) error {
	if len(peers) == 0 {
		return nil
	}
	_, err := n.gossip.Join(peers)
	switch {
	case errors.Is(err, cluster.ErrNameTaken):
		return fmt.Errorf("%w: give this agent another --name", err)
	case err != nil:
		n.log.Warn("no gossip peer answered yet; trying again", zap.Strings("peers", peers), zap.Error(err))
	}
	return nil
}

// discoverStore waits until gossip names an alive node hosting the store,
// joining the peers again meanwhile, and returns the store's address.
func (n *Node) discoverStore(ctx context.Context, peers []string) (string, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	start, said := time.Now(), time.Now()
	for {
		for _, m := range n.gossip.Members() {
			if m.State == cluster.Alive && m.Meta.Store && !m.Meta.StoreStarting && m.Meta.GRPCAddr != "" {
				n.log.Info("store found through gossip", zap.String("store", m.Meta.GRPCAddr), zap.String("node", m.Name))
				return m.Meta.GRPCAddr, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no store found through gossip from %v: %w", peers, ctx.Err())
		case <-t.C:
		}
		if time.Since(said) >= discoverEvery {
			said = time.Now()
			n.log.Warn("waiting for the store through gossip", zap.Strings("peers", peers),
				zap.Int("members", n.gossip.NumAlive()), zap.Duration("waited", time.Since(start).Round(time.Second)))
			if n.gossip.NumAlive() <= 1 {
				if err := n.joinGossip(peers); err != nil {
					return "", err
				}
			}
		}
	}
}

// setMeta gossips this node's metadata; starting says its store may still
// yield to another (claimStore).
func (n *Node) setMeta(total, free int, storeAddr string, starting bool) {
	m := cluster.Meta{GPUsTotal: total, GPUsFree: free, GRPCAddr: storeAddr, Store: storeAddr != "", StoreStarting: starting,
		Version: version.Short(), NodeTimeout: n.nodeTimeout}
	if err := n.gossip.UpdateMeta(m, gossipMetaTimeout); err != nil {
		n.log.Debug("gossip metadata", zap.Error(err))
	}
}

// watchGossip hands membership changes to the store, when this node hosts
// it, and to the agent, which stops its jobs with a dead peer. It ends when
// the member closes. Metadata goes out from a loop of its own, so that a
// slow update never holds up a death.
func (n *Node) watchGossip(storeAddr string) {
	defer close(n.gossipDone)
	go n.gossipFreeGPUs(storeAddr)
	for ev := range n.gossip.Events() {
		n.handleGossip(ev)
	}
}

// gossipFreeGPUs gossips this node's free GPUs as jobs come and go, until
// watchGossip ends.
func (n *Node) gossipFreeGPUs(storeAddr string) {
	for {
		select {
		case <-n.gossipDone:
			return
		case <-n.agent.GPUsChanged():
			n.setMeta(n.gpus, n.agent.FreeGPUs(), storeAddr, false)
		}
	}
}

func (n *Node) handleGossip(ev cluster.Event) {
	n.warnOtherStore(ev)
	m := ev.Member
	if ev.Type == cluster.EventJoin || ev.Type == cluster.EventUpdate {
		n.checkNodeTimeout(m)
	}
	l := rendezvous.Liveness{State: rendezvous.GossipAlive, Addr: m.Addr}
	switch ev.Type {
	case cluster.EventLeave:
		l.State = rendezvous.GossipLeft
	case cluster.EventDead:
		l.State, l.Silent = rendezvous.GossipDead, m.SinceAck
	}
	if n.store != nil {
		n.store.SetLiveness(m.Name, l)
	}
	// The store's own node sees what the store sees: its word is no second view.
	if ev.Type == cluster.EventDead && n.agent != nil && n.store == nil {
		n.agent.PeerLost(failure.Loss(m.Name, musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD, "", m.SinceAck, ""))
	}
}

// checkNodeTimeout logs, once per value, a node whose node timeout differs
// from this one's: nodes then disagree on when a silent node is dead, and
// the shortest timeout decides for everyone.
func (n *Node) checkNodeTimeout(m cluster.Member) {
	theirs := m.Meta.NodeTimeout
	if theirs == 0 || m.Name == n.gossip.Name() || n.timeouts[m.Name] == theirs {
		return
	}
	n.timeouts[m.Name] = theirs
	if theirs == n.nodeTimeout {
		return
	}
	what := "node"
	if m.Meta.Store {
		what = "the store's node"
	}
	n.log.Warn("node timeouts differ: set --node-timeout (MUSTER_NODE_TIMEOUT) the same on every node; the shortest decides when a silent node is dead",
		zap.String(what, m.Name), zap.Duration("its_node_timeout", theirs), zap.Duration("node_timeout", n.nodeTimeout))
}

// moveAfter is how long an agent's store may be silent before the agent
// looks through gossip for a store elsewhere: longer than a store's restart
// in place takes, well inside the fence bound (15 s), within which the
// agent must register with the new store for its jobs to live.
const moveAfter = 3 * time.Second

// followStore moves the agent to a store that another node hosts now, when
// its own has been silent for moveAfter: the head node died and a store was
// started on another node. It ends with watchGossip.
func (n *Node) followStore() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-n.gossipDone:
			return
		case <-t.C:
		}
		if n.agent.StoreSilentFor() < moveAfter {
			continue
		}
		for _, m := range n.gossip.Members() {
			if m.State != cluster.Alive || !m.Meta.Store || m.Meta.StoreStarting || m.Meta.GRPCAddr == "" || m.Name == n.gossip.Name() {
				continue
			}
			if err := n.agent.MoveStore(security.NormalizeAddr(m.Meta.GRPCAddr)); err != nil {
				n.log.Warn("cannot follow the store", zap.String("node", m.Name), zap.Error(err))
				return
			}
			break
		}
	}
}
