// Package cluster is gossip membership on hashicorp/memberlist: each member's metadata (GPUs,
// the agent's gRPC address, whether it hosts the store), failure detection and its events,
// timing profiles, and a gossip key derived from the cluster token.
package cluster

import (
	"context"
	"errors"
	"fmt"
	gometrics "github.com/hashicorp/go-metrics"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// State is a member's gossip state.
type State int

const (
	Alive State = iota
	// Suspect is a member that missed probes and may be declared dead. memberlist v0.7 does
	// not expose suspicion through its API, so Members does not report it yet.
	Suspect
	Dead // stopped answering: declared dead
	Left // left with Leave
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

func stateOf(s memberlist.NodeStateType) State {
	switch s {
	case memberlist.StateSuspect:
		return Suspect
	case memberlist.StateDead:
		return Dead
	case memberlist.StateLeft:
		return Left
	}
	return Alive
}

// Member is one member as this one sees it.
type Member struct {
	Name  string
	Addr  string // advertised host:port
	State State
	Meta  Meta
	// MetaErr is set when the member's metadata could not be decoded; Meta is then zero.
	MetaErr error
	// SinceAck, in a dead member's event, is how long before it this member last had a probe
	// of it answered; 0 when it never had.
	SinceAck time.Duration
}

// EventType says what happened to a member.
type EventType int

const (
	EventJoin   EventType = iota // a member is alive (new, or back)
	EventUpdate                  // an alive member changed its metadata or address
	EventLeave                   // a member left gracefully
	EventDead                    // a member stopped answering and was declared dead
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventDead:
		return "dead"
	}
	return "event(" + strconv.Itoa(int(t)) + ")"
}

// Event is a change in membership.
type Event struct {
	Type   EventType
	Member Member
	At     time.Time // when this member learned it
}

// ErrNameTaken is returned by Join when an alive member already has this member's name.
var ErrNameTaken = errors.New("cluster: name already taken by an alive member")

// ErrOtherToken wraps a join that reached peers whose gossip this member cannot decrypt.
var ErrOtherToken = errors.New("cluster: the peer gossips with another cluster token")

// ErrClosed is returned by calls on a closed Cluster.
var ErrClosed = errors.New("cluster: closed")

// maxDeparted bounds how many dead or left members Members remembers.
const maxDeparted = 4096

// Cluster is this process's member of the gossip cluster.
type Cluster struct {
	name   string
	log    *zap.Logger
	ml     *memberlist.Memberlist
	local  net.IP
	rejoin time.Duration
	tries  int

	events  chan Event
	dropped atomic.Uint64

	mu       sync.Mutex
	meta     []byte
	closed   bool
	peers    []string             // given to Join, joined again by the rejoin loop
	alive    map[string]Member    // alive members, itself included, as the delegate saw them
	departed map[string]departure // dead or left members, by name

	acks map[string]time.Time // when this member last had a probe of each member answered

	nameTaken atomic.Pointer[memberlist.Node] // set by the merge delegate during Join
	self      atomic.Pointer[memberlist.Node] // this member as advertised, once started

	stop     chan struct{}
	loopDone chan struct{}
	once     sync.Once
	// metricsID labels this member's metrics; unrouteMetrics stops them
	// reaching Config.MetricSink.
	metricsID      string
	unrouteMetrics func()
}

type departure struct {
	m  Member
	at time.Time
}

// Start creates the member: it binds its UDP and TCP ports and is alive on its own until Join.
// ctx bounds only the start. A failed Start undoes what it made.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	mc, rejoin, err := cfg.memberlistConfig()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	meta, err := cfg.Meta.MarshalBinary()
	if err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	c := &Cluster{
		name:           cfg.Name,
		log:            lg,
		rejoin:         rejoin,
		tries:          cfg.JoinAttempts,
		meta:           meta,
		alive:          map[string]Member{},
		departed:       map[string]departure{},
		acks:           map[string]time.Time{},
		stop:           make(chan struct{}),
		loopDone:       make(chan struct{}),
		unrouteMetrics: func() {},
	}
	if c.tries <= 0 {
		c.tries = 5
	}
	n := cfg.EventBuffer
	if n <= 0 {
		n = 1024
	}
	c.events = make(chan Event, n)
	d := &delegate{c: c}
	mc.Delegate, mc.Events, mc.Merge, mc.Alive, mc.Conflict, mc.Ping = d, d, d, d, d, d
	mc.LogOutput = nil
	mc.Logger = memberlistLogger(lg)
	if cfg.MetricSink != nil {
		c.metricsID = newMemberID()
		mc.MetricLabels = []gometrics.Label{{Name: memberLabel, Value: c.metricsID}}
		c.unrouteMetrics = routeMetrics(c.metricsID, cfg.MetricSink)
	}
	defer func() {
		if err != nil {
			c.undoStart()
		}
	}()
	if c.ml, err = memberlist.Create(mc); err != nil {
		return nil, fmt.Errorf("cluster: start member %q: %w", cfg.Name, err)
	}
	// A copy: memberlist changes its nodes under its own lock; the delegate sees them under it.
	local := *c.ml.LocalNode()
	self := &local
	if err := checkAdvertise(self.Addr, nil); err != nil {
		return nil, err
	}
	c.local = self.Addr
	c.self.Store(self)
	go c.rejoinLoop()
	c.log.Info("gossip member started", zap.String("name", cfg.Name),
		zap.String("addr", self.Address()), zap.Stringer("profile", cfg.Profile),
		zap.Duration("node_timeout", mc.ProbeInterval*time.Duration(1+mc.SuspicionMult)))
	return c, nil
}

// Name is this member's name.
func (c *Cluster) Name() string { return c.name }

// Addr is this member's advertised host:port, the address others Join.
func (c *Cluster) Addr() string { return c.self.Load().Address() }

// Events delivers membership changes. The channel is bounded: when its reader falls behind,
// events are dropped (see Dropped) rather than ever blocking gossip. Members is always the
// whole current view. The channel is closed by Close.
func (c *Cluster) Events() <-chan Event { return c.events }

// Dropped is how many events did not fit the events channel.
func (c *Cluster) Dropped() uint64 { return c.dropped.Load() }

func (c *Cluster) emit(t EventType, m Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	select {
	case c.events <- Event{Type: t, Member: m, At: time.Now()}:
	default:
		c.dropped.Add(1)
	}
}

// Join contacts peers (host:port) and merges state with them; it returns how many it reached.
// Each round tries every peer; rounds repeat with backoff up to Config.JoinAttempts times
// until one peer answers. The peers are remembered: the rejoin loop joins those that are not
// alive members again, so a member whose peers were down, or cut off, merges when they return.
func (c *Cluster) Join(peers []string) (int, error) {
	if len(peers) == 0 {
		return 0, nil
	}
	for _, p := range peers {
		if err := c.checkPeer(p); err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, ErrClosed
	}
	for _, p := range peers {
		if !slices.Contains(c.peers, p) {
			c.peers = append(c.peers, p)
		}
	}
	c.mu.Unlock()
	backoff := 100 * time.Millisecond
	var err error
	for try := 1; ; try++ {
		var n int
		n, err = c.join(peers)
		if n > 0 || errors.Is(err, ErrNameTaken) {
			return n, err
		}
		if try >= c.tries {
			break
		}
		select {
		case <-c.stop:
			return 0, ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return 0, fmt.Errorf("cluster: join %v: no peer reached after %d attempts: %w", peers, c.tries, err)
}

func (c *Cluster) join(peers []string) (int, error) {
	c.nameTaken.Store(nil)
	n, err := c.ml.Join(peers)
	if err != nil && strings.Contains(err.Error(), "no installed keys could decrypt") {
		err = fmt.Errorf("%w (or none): check this member's token file or MUSTER_TOKEN: %v", ErrOtherToken, err)
	}
	if other := c.nameTaken.Load(); other != nil {
		return 0, fmt.Errorf("%w: %q is alive at %s (this member is %s)", ErrNameTaken, c.name, other.Address(), c.Addr())
	}
	return n, err
}

// checkPeer applies the advertise rule to a peer's address when it is an IP or resolves
// quickly; a peer that does not resolve is left to memberlist to report.
func (c *Cluster) checkPeer(peer string) error {
	if !c.local.IsLoopback() {
		return nil
	}
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		host = peer
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil
		}
		ips = ips[:0]
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	for _, ip := range ips {
		if err := checkAdvertise(c.local, ip); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) rejoinLoop() {
	defer close(c.loopDone)
	if c.rejoin < 0 {
		return
	}
	t := time.NewTicker(c.rejoin)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		alive := map[string]bool{}
		for _, m := range c.alive {
			alive[m.Addr] = true
		}
		var missing []string
		for _, p := range c.peers {
			if !alive[p] {
				missing = append(missing, p)
			}
		}
		c.mu.Unlock()
		if len(missing) == 0 {
			continue
		}
		if n, err := c.join(missing); err != nil {
			c.log.Debug("rejoin", zap.Strings("peers", missing), zap.Int("reached", n), zap.Error(err))
		}
	}
}

func toMember(n *memberlist.Node) Member {
	m := Member{Name: n.Name, Addr: n.Address(), State: stateOf(n.State)}
	m.MetaErr = m.Meta.UnmarshalBinary(n.Meta)
	return m
}

// Members is every member this one knows: the alive ones, itself included, and the
// dead and left ones it has seen depart (the most recent few thousand), sorted by name.
//
// The view is the one memberlist's events built: memberlist's own Members hands out nodes it
// goes on changing, which cannot be read safely.
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	out := make([]Member, 0, len(c.alive)+len(c.departed))
	for _, m := range c.alive {
		out = append(out, m)
	}
	for _, d := range c.departed {
		out = append(out, d.m)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// SinceAck is how long ago this member last had a probe of the named member answered, and
// whether it ever had: what a dead member's message says ("no gossip ack for 1.3 s").
func (c *Cluster) SinceAck(name string) (time.Duration, bool) {
	c.mu.Lock()
	at, ok := c.acks[name]
	c.mu.Unlock()
	if !ok {
		return 0, false
	}
	return time.Since(at), true
}

// ProcessGone says whether the named member's process is gone: its host refused a TCP
// connection to the member's gossip port, or reset one it had queued, within timeout. A
// killed process's sockets are released a little after it dies, its listener sometimes
// after its other connections: a connection queued on that listener is reset when it goes.
// A member that keeps the connection open, or a host that does not answer, is not known to
// be gone: gossip decides those.
func (c *Cluster) ProcessGone(name string, timeout time.Duration) bool {
	c.mu.Lock()
	m, ok := c.alive[name]
	if !ok {
		if d, gone := c.departed[name]; gone {
			m, ok = d.m, true
		}
	}
	c.mu.Unlock()
	if !ok {
		return false
	}
	deadline := time.Now().Add(timeout)
	conn, err := net.DialTimeout("tcp", m.Addr, timeout)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	defer conn.Close()
	// A live member waits for this side to speak, far longer than timeout.
	conn.SetReadDeadline(deadline)
	_, err = conn.Read(make([]byte, 1))
	gone := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
	c.log.Debug("probe of a member's gossip port", zap.String("name", name), zap.Bool("gone", gone), zap.Error(err))
	return gone
}

// NumAlive is how many members memberlist counts alive (suspect ones too), this one included.
func (c *Cluster) NumAlive() int { return c.ml.NumMembers() }

// UpdateMeta changes this member's metadata and gossips it; it waits at most timeout for
// the update to be sent to the others.
func (c *Cluster) UpdateMeta(m Meta, timeout time.Duration) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.meta = b
	c.mu.Unlock()
	return c.ml.UpdateNode(timeout)
}

// Leave tells the others this member is leaving, waits at most timeout for that to be
// gossiped, and closes it. The others see it as left rather than dead.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	var m Meta
	if err := m.UnmarshalBinary(c.meta); err == nil {
		m.leaving = true
		c.meta, _ = m.MarshalBinary()
	}
	c.mu.Unlock()
	// First the leaving flag, then memberlist's leave: the others mark the member left.
	err := c.ml.UpdateNode(timeout / 2)
	if lerr := c.ml.Leave(timeout / 2); err == nil {
		err = lerr
	}
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return err
}

// undoStart closes what a failed Start made: the member, if created, and
// the route of its metrics.
func (c *Cluster) undoStart() {
	if c.ml != nil {
		_ = c.ml.Shutdown()
	}
	c.unrouteMetrics()
}

// Close stops this member at once, without telling the others, who declare it dead. It
// closes the events channel. Calling it again does nothing.
func (c *Cluster) Close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		err = c.ml.Shutdown() // closes the transport; its goroutines stop within their timeouts
		<-c.loopDone          // the loop's calls into memberlist are bounded by TCPTimeout
		c.unrouteMetrics()
		c.mu.Lock()
		c.closed = true
		close(c.events)
		c.mu.Unlock()
	})
	return err
}

// delegate is memberlist's view of the cluster. Its methods are called with memberlist's
// locks held: they never block.
type delegate struct{ c *Cluster }

func (d *delegate) NodeMeta(limit int) []byte {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	if len(d.c.meta) > limit {
		return nil
	}
	return slices.Clone(d.c.meta)
}

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// AckPayload and NotifyPingComplete make the delegate memberlist's PingDelegate: a probe
// answered is the time a later "no gossip ack for" counts from.
func (d *delegate) AckPayload() []byte { return nil }

func (d *delegate) NotifyPingComplete(n *memberlist.Node, _ time.Duration, _ []byte) {
	d.c.mu.Lock()
	if _, ok := d.c.alive[n.Name]; ok {
		d.c.acks[n.Name] = time.Now()
	}
	d.c.mu.Unlock()
}

func (d *delegate) NotifyJoin(n *memberlist.Node) {
	m := toMember(n)
	d.c.mu.Lock()
	delete(d.c.departed, n.Name)
	d.c.alive[n.Name] = m
	d.c.mu.Unlock()
	d.c.emit(EventJoin, m)
}

func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	m := toMember(n)
	d.c.mu.Lock()
	if _, ok := d.c.alive[n.Name]; ok {
		d.c.alive[n.Name] = m
	}
	d.c.mu.Unlock()
	d.c.emit(EventUpdate, m)
}

func (d *delegate) NotifyLeave(n *memberlist.Node) {
	m := toMember(n)
	t := EventDead
	m.State = Dead
	if m.Meta.leaving {
		t, m.State = EventLeave, Left
	}
	d.c.mu.Lock()
	delete(d.c.alive, n.Name)
	if len(d.c.departed) >= maxDeparted {
		var oldest string
		var at time.Time
		for name, dep := range d.c.departed {
			if oldest == "" || dep.at.Before(at) {
				oldest, at = name, dep.at
			}
		}
		delete(d.c.departed, oldest)
	}
	d.c.departed[n.Name] = departure{m: m, at: time.Now()}
	if at, ok := d.c.acks[n.Name]; ok {
		m.SinceAck = time.Since(at)
	}
	delete(d.c.acks, n.Name)
	d.c.mu.Unlock()
	d.c.emit(t, m)
}

// NotifyMerge refuses to merge with a cluster where another member, alive at another
// address, has this member's name: Join then fails with ErrNameTaken.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	me := d.c.self.Load()
	if me == nil {
		return nil
	}
	for _, p := range peers {
		if p.Name == me.Name && p.State == memberlist.StateAlive &&
			(!p.Addr.Equal(me.Addr) || p.Port != me.Port) {
			d.c.nameTaken.Store(p)
			return fmt.Errorf("%w: %q is alive at %s", ErrNameTaken, p.Name, p.Address())
		}
	}
	return nil
}

// NotifyAlive keeps out members that could not be reached, by the advertise rule.
func (d *delegate) NotifyAlive(p *memberlist.Node) error {
	me := d.c.self.Load()
	if me == nil || p.Name == me.Name {
		return nil
	}
	if p.Addr.IsLoopback() && !me.Addr.IsLoopback() {
		return fmt.Errorf("member %q advertises loopback address %s", p.Name, p.Address())
	}
	return nil
}

func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.c.log.Warn("gossip: two members with one name; keeping the one known first",
		zap.String("name", existing.Name), zap.String("known", existing.Address()),
		zap.String("refused", other.Address()))
}
