package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

const testToken = "test-token"

func newMember(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1"
	}
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	if cfg.Profile == LAN && cfg.RejoinInterval == 0 {
		cfg.RejoinInterval = -1
	}
	c, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func aliveNames(c *Cluster) map[string]bool {
	out := map[string]bool{}
	for _, m := range c.Members() {
		if m.State == Alive {
			out[m.Name] = true
		}
	}
	return out
}

func TestJoin(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 32} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ms := make([]*Cluster, n)
			for i := range ms {
				ms[i] = newMember(t, Config{Name: fmt.Sprintf("node-%02d", i), Profile: Local,
					Meta: Meta{GPUsTotal: i, GPUsFree: i / 2, GRPCAddr: fmt.Sprintf("127.0.0.1:%d", 20000+i), Store: i == 0, Version: "test"}})
			}
			var wg sync.WaitGroup
			for _, m := range ms[1:] {
				wg.Go(func() {
					if got, err := m.Join([]string{ms[0].Addr()}); err != nil || got != 1 {
						t.Errorf("%s: join: %d, %v", m.Name(), got, err)
					}
				})
			}
			wg.Wait()
			for _, m := range ms {
				// Generous: a loaded machine (the race detector, other packages) slows gossip, not its outcome.
				testwait.Until(t, 60*time.Second, m.Name()+" sees every member", func() bool { return len(aliveNames(m)) == n })
			}
			for i, mem := range ms[n-1].Members() {
				want := Meta{GPUsTotal: i, GPUsFree: i / 2, GRPCAddr: fmt.Sprintf("127.0.0.1:%d", 20000+i), Store: i == 0, Version: "test"}
				if mem.Name != ms[i].Name() || mem.Addr != ms[i].Addr() || mem.Meta != want || mem.MetaErr != nil {
					t.Errorf("member %d: %+v, want %s at %s with %+v", i, mem, ms[i].Name(), ms[i].Addr(), want)
				}
			}
		})
	}
}

func TestWrongTokenCannotJoin(t *testing.T) {
	t.Parallel()
	logs := &testfixture.Buffer{}
	a := newMember(t, Config{Name: "a", Profile: Local})
	b := newMember(t, Config{Name: "b", Profile: Local, Token: "another", JoinAttempts: 2,
		Logger: zap.New(zapcoreFor(logs))})
	if n, err := b.Join([]string{a.Addr()}); err == nil {
		t.Fatalf("join with another token reached %d", n)
	}
	// a never learns of b: b's gossip does not decrypt.
	time.Sleep(500 * time.Millisecond)
	if got := aliveNames(a); len(got) != 1 {
		t.Fatalf("a sees %v", got)
	}
	if got := aliveNames(b); len(got) != 1 {
		t.Fatalf("b sees %v", got)
	}
	if logs.Len() == 0 {
		t.Error("memberlist wrote nothing to zap")
	}
}

func TestDuplicateNameRefused(t *testing.T) {
	t.Parallel()
	// A long node timeout: on a loaded machine (the race detector, other tests) b may
	// otherwise suspect a for a moment, and a suspect member's name is not refused.
	const timeout = 30 * time.Second
	a := newMember(t, Config{Name: "a", Profile: Local, NodeTimeout: timeout})
	b := newMember(t, Config{Name: "b", Profile: Local, NodeTimeout: timeout})
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	for _, peer := range []*Cluster{a, b} {
		dup := newMember(t, Config{Name: "a", Profile: Local, NodeTimeout: timeout})
		_, err := dup.Join([]string{peer.Addr()})
		if !errors.Is(err, ErrNameTaken) {
			t.Fatalf("second \"a\" joining %s: %v, want ErrNameTaken", peer.Name(), err)
		}
		t.Logf("joining %s: %v", peer.Name(), err)
		_ = dup.Close()
	}
	time.Sleep(300 * time.Millisecond)
	for _, m := range b.Members() {
		if m.Name == "a" && (m.Addr != a.Addr() || m.State != Alive) {
			t.Fatalf("b sees a as %+v, want alive at %s", m, a.Addr())
		}
	}
}

func TestDeparture(t *testing.T) {
	t.Parallel()
	// The leave case waits long for its broadcast and keeps silent members alive long, so
	// that a loaded machine cannot turn a late leave into a death.
	for _, tc := range []struct {
		name    string
		timeout time.Duration // node timeout; 0 is the profile's
		stop    func(*Cluster) error
		event   EventType
		state   State
	}{
		{"close", 0, (*Cluster).Close, EventDead, Dead},
		{"leave", 30 * time.Second, func(c *Cluster) error { return c.Leave(10 * time.Second) }, EventLeave, Left},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newMember(t, Config{Name: "a", Profile: Local, NodeTimeout: tc.timeout})
			b := newMember(t, Config{Name: "b", Profile: Local, NodeTimeout: tc.timeout})
			c := newMember(t, Config{Name: "c", Profile: Local, NodeTimeout: tc.timeout})
			for _, m := range []*Cluster{b, c} {
				if _, err := m.Join([]string{a.Addr()}); err != nil {
					t.Fatal(err)
				}
			}
			testwait.Until(t, 30*time.Second, "a sees 3", func() bool { return len(aliveNames(a)) == 3 })
			if err := tc.stop(c); err != nil {
				t.Fatal(err)
			}
			for _, m := range []*Cluster{a, b} {
				waitEvent(t, m, 30*time.Second, "c", tc.event)
				var found bool
				for _, mem := range m.Members() {
					if mem.Name == "c" {
						found = true
						if mem.State != tc.state {
							t.Errorf("%s sees c %v, want %v", m.Name(), mem.State, tc.state)
						}
					}
				}
				if !found {
					t.Errorf("%s forgot c", m.Name())
				}
			}
		})
	}
}

func waitEvent(t testing.TB, c *Cluster, timeout time.Duration, name string, typ EventType) Event {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-c.Events():
			if !ok {
				t.Fatalf("%s: events closed", c.Name())
			}
			if e.Member.Name == name && e.Type == typ {
				return e
			}
		case <-timer.C:
			t.Fatalf("%s: no %v event for %s in %v", c.Name(), typ, name, timeout)
		}
	}
}

// TestDetectionLAN stops a member without a word (its transport closes) and checks the
// others declare it dead, and none before the node timeout; how fast is measured by
// BenchmarkGossip, not asserted here. It runs before the package's parallel
// tests: their gossip would delay its probes past the bounds it checks.
func TestDetectionLAN(t *testing.T) {
	const timeout = 2 * time.Second
	ms := make([]*Cluster, 4)
	for i := range ms {
		ms[i] = newMember(t, Config{Name: fmt.Sprintf("n%d", i), Profile: LAN, NodeTimeout: timeout})
		if i > 0 {
			if _, err := ms[i].Join([]string{ms[0].Addr()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range ms {
		testwait.Until(t, 10*time.Second, "all see 4", func() bool { return len(aliveNames(m)) == 4 })
	}
	if ms[0].ProcessGone("n3", 200*time.Millisecond) {
		t.Fatal("an alive member's port refused")
	}
	start := time.Now()
	_ = ms[3].Close()
	if !ms[0].ProcessGone("n3", 200*time.Millisecond) {
		t.Fatal("a closed member's port did not refuse")
	}
	for _, m := range ms[:3] {
		e := waitEvent(t, m, 10*time.Second, "n3", EventDead)
		// The earliest declaration is a probe sent just before the close: it fails a probe
		// interval later, and the suspicion lasts the rest of the timeout.
		if early := timeout - DetectorFor(timeout).ProbeInterval; e.At.Sub(start) < early {
			t.Fatalf("%s: n3 dead %v after its close, before %v", m.Name(), e.At.Sub(start), early)
		}
		// The last ack, if this member had one yet, came before the close.
		if e.Member.SinceAck != 0 && (e.Member.SinceAck < e.At.Sub(start) || e.Member.SinceAck > 10*time.Second) {
			t.Fatalf("%s: n3 dead %v after its close, %v after its last ack", m.Name(), e.At.Sub(start), e.Member.SinceAck)
		}
		t.Logf("%s: n3 dead after %v, last ack %v before", m.Name(), e.At.Sub(start), e.Member.SinceAck)
	}
}

func TestUpdateMeta(t *testing.T) {
	a := newMember(t, Config{Name: "a", Profile: Local, Meta: Meta{GPUsTotal: 4, GPUsFree: 4}})
	b := newMember(t, Config{Name: "b", Profile: Local})
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	want := Meta{GPUsTotal: 4, GPUsFree: 1, GRPCAddr: "127.0.0.1:29400", Store: true, Version: "v2"}
	if err := a.UpdateMeta(want, time.Second); err != nil {
		t.Fatal(err)
	}
	for {
		e := waitEvent(t, b, 5*time.Second, "a", EventUpdate)
		if e.Member.Meta == want {
			break
		}
	}
	if err := a.UpdateMeta(Meta{GPUsTotal: 1, GPUsFree: 2}, time.Second); !errors.Is(err, ErrMeta) {
		t.Fatalf("bad metadata: %v", err)
	}
}

// TestRejoin: a member whose peer was down when it joined merges once the peer is up.
func TestRejoin(t *testing.T) {
	t.Parallel()
	tmp := newMember(t, Config{Name: "tmp", Profile: Local})
	addr := tmp.Addr()
	_ = tmp.Close()
	a := newMember(t, Config{Name: "a", Profile: Local, JoinAttempts: 1, RejoinInterval: 200 * time.Millisecond})
	if _, err := a.Join([]string{addr}); err == nil {
		t.Fatal("join of a member not yet started succeeded")
	}
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	b := newMember(t, Config{Name: "b", Profile: Local, BindPort: p})
	testwait.Until(t, 10*time.Second, "a and b merge", func() bool { return len(aliveNames(a)) == 2 && len(aliveNames(b)) == 2 })
}

func TestCloseIdempotent(t *testing.T) {
	a := newMember(t, Config{Name: "a", Profile: Local})
	for range 3 {
		_ = a.Close()
	}
	for range a.Events() { // ends: Close closed the channel
	}
	if err := a.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Leave after Close: %v", err)
	}
	if _, err := a.Join([]string{"127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Join after Close: %v", err)
	}
	if err := a.UpdateMeta(Meta{}, time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("UpdateMeta after Close: %v", err)
	}
}

func TestEventsNeverBlock(t *testing.T) {
	a := newMember(t, Config{Name: "a", Profile: Local, EventBuffer: 1})
	for i := range 3 {
		m := newMember(t, Config{Name: fmt.Sprintf("b%d", i), Profile: Local})
		if _, err := m.Join([]string{a.Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 10*time.Second, "a sees 4 with nobody reading", func() bool { return len(aliveNames(a)) == 4 })
	if a.Dropped() == 0 {
		t.Fatal("no event dropped from a buffer of 1")
	}
}

func TestLoopbackAdvertiseJoinsOnlyLoopback(t *testing.T) {
	a := newMember(t, Config{Name: "a", Profile: Local})
	_, err := a.Join([]string{"10.1.2.3:7946"})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("loopback member joining 10.1.2.3: %v, want ErrConfig", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no name":               {Token: "t"},
		"no token":              {Name: "a"},
		"advertise 0.0.0.0":     {Name: "a", Token: "t", AdvertiseAddr: "0.0.0.0"},
		"advertise ::":          {Name: "a", Token: "t", AdvertiseAddr: "::"},
		"advertise a host name": {Name: "a", Token: "t", AdvertiseAddr: "example.com"},
		"bind not an IP":        {Name: "a", Token: "t", BindAddr: "eth0"},
		"bad port":              {Name: "a", Token: "t", BindPort: 70000},
		"bad meta":              {Name: "a", Token: "t", Meta: Meta{GPUsTotal: -1}},
		"bad profile":           {Name: "a", Token: "t", Profile: 9},
		"node timeout short":    {Name: "a", Token: "t", NodeTimeout: 500 * time.Millisecond},
		"node timeout long":     {Name: "a", Token: "t", NodeTimeout: time.Hour},
	} {
		if _, err := Start(context.Background(), cfg); err == nil {
			t.Errorf("%s: started", name)
		}
	}
}

// The detector spans the node timeout: a probe interval to find the silence, the rest for
// the suspicion (at up to 10 members), whatever the timeout; each profile applies it.
func TestDetectorFor(t *testing.T) {
	for _, tc := range []struct {
		profile Profile
		timeout time.Duration
		want    time.Duration
	}{
		{LAN, 0, DefaultNodeTimeout},
		{Local, 0, LocalNodeTimeout},
		{LAN, MinNodeTimeout, MinNodeTimeout},
		{LAN, 30 * time.Second, 30 * time.Second},
		{Local, 3 * time.Second, 3 * time.Second},
	} {
		mc, _, err := profileConfig(tc.profile, tc.timeout)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.profile, tc.timeout, err)
		}
		d := DetectorFor(tc.want)
		got := Detector{mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult, mc.SuspicionMaxTimeoutMult, mc.IndirectChecks, mc.AwarenessMaxMultiplier, mc.PushPullInterval}
		if got != d {
			t.Errorf("%v %v: memberlist has %+v, want %+v", tc.profile, tc.timeout, got, d)
		}
		if span := d.ProbeInterval * time.Duration(1+d.SuspicionMult); span != tc.want {
			t.Errorf("%v %v: probe and suspicion span %v, want %v", tc.profile, tc.timeout, span, tc.want)
		}
		// A suspicion made while cut off must reach a member well before it runs out.
		if d.ProbeTimeout >= d.ProbeInterval || d.SuspicionMaxTimeoutMult < 2 || d.IndirectChecks < 1 || d.PushPullInterval > tc.want/4 {
			t.Errorf("%v %v: %+v", tc.profile, tc.timeout, d)
		}
	}
}

func TestCheckAdvertise(t *testing.T) {
	for _, tc := range []struct {
		local, peer string
		ok          bool
	}{
		{"10.0.0.1", "", true},
		{"10.0.0.1", "10.0.0.2", true},
		{"10.0.0.1", "127.0.0.1", true}, // a peer on loopback is this host's, it can reach us
		{"127.0.0.1", "127.0.0.2", true},
		{"::1", "127.0.0.1", true},
		{"127.0.0.1", "10.0.0.2", false},
		{"::1", "fd00::2", false},
		{"0.0.0.0", "", false},
		{"::", "", false},
		{"0.0.0.0", "127.0.0.1", false},
	} {
		var peer net.IP
		if tc.peer != "" {
			peer = net.ParseIP(tc.peer)
		}
		err := checkAdvertise(net.ParseIP(tc.local), peer)
		if (err == nil) != tc.ok {
			t.Errorf("advertise %s, peer %q: %v", tc.local, tc.peer, err)
		}
	}
}

func TestSecretKey(t *testing.T) {
	k1, err := SecretKey("tok")
	if err != nil || len(k1) != 32 {
		t.Fatalf("%x, %v", k1, err)
	}
	k2, _ := SecretKey("tok")
	k3, _ := SecretKey("tok2")
	if !bytes.Equal(k1, k2) || bytes.Equal(k1, k3) {
		t.Fatal("key is not a function of the token")
	}
	if _, err := SecretKey(""); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
}

func zapcoreFor(w *testfixture.Buffer) zapcore.Core {
	return zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(w), zap.DebugLevel)
}

// A member advertises an IPv4 address in its 4-byte form however it got it: memberlist
// compares addresses bytewise, and a node that advertised both forms under one name
// (restarted with other flags) conflicted with itself until every member restarted.
func TestAdvertiseIPv4InFourBytes(t *testing.T) {
	t.Parallel()
	private, err := sockaddr.GetPrivateIP()
	if err != nil || private == "" || net.ParseIP(private).To4() == nil {
		t.Skipf("no private IPv4 address on this machine: %q, %v", private, err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"bound to every address, none given", Config{BindAddr: "0.0.0.0"}},
		{"advertise given", Config{BindAddr: "0.0.0.0", AdvertiseAddr: private}},
		{"bound to one address", Config{BindAddr: private}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Name = "a"
			c := newMember(t, tc.cfg)
			if got := c.self.Load().Addr; len(got) != net.IPv4len || !got.Equal(net.ParseIP(private)) {
				t.Fatalf("advertised %v in %d bytes, want %s in %d", got, len(got), private, net.IPv4len)
			}
		})
	}
}
