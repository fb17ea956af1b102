package cluster

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	gometrics "github.com/hashicorp/go-metrics"
	"net"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// Label is set on every gossip packet and stream; members with another label ignore them.
const Label = "muster/v1"

// keyInfo is HKDF's info string for the gossip key; changing it changes every key.
const keyInfo = "muster/v1 memberlist gossip key"

// Profile picks memberlist's timing other than failure detection, which NodeTimeout sets.
type Profile int

const (
	// LAN is for real networks.
	LAN Profile = iota
	// Local is for tests on one host: faster gossip, shorter TCP timeouts, quick rejoin, and a
	// node timeout of LocalNodeTimeout unless one is given. No test that stops or cuts off a
	// member for seconds may rely on it.
	Local
)

// DefaultNodeTimeout is the LAN profile's node timeout: a GC pause, a link flap or a throttled
// pod of a few seconds is ordinary on GPU nodes, and a false kill of a large job costs far more
// than a few seconds of detection.
const DefaultNodeTimeout = 5 * time.Second

// LocalNodeTimeout is the Local profile's node timeout, for tests on one host: long
// enough for dozens of members in one process under the race detector.
const LocalNodeTimeout = 3 * time.Second

// Bounds on a node timeout: below a second a busy host's scheduling delays look like deaths;
// above ten minutes a dead node holds its jobs' GPUs longer than any scheduler waits.
const (
	MinNodeTimeout = time.Second
	MaxNodeTimeout = 10 * time.Minute
)

// Detector is memberlist's failure detector, derived from a node timeout by DetectorFor.
type Detector struct {
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	IndirectChecks          int
	AwarenessMaxMultiplier  int
	PushPullInterval        time.Duration
}

// detectorSteps is how many probe intervals a node timeout spans: one for the probe that
// finds the silence, the rest (SuspicionMult) for the suspicion the member may refute.
const detectorSteps = 10

// DetectorFor derives memberlist's failure detector from a node timeout T, so that a member
// silent for less than T is never declared dead and one silent for longer is declared dead
// about T after its silence began, in clusters of up to 10 members:
//
//   - probes every T/10 (ProbeInterval), the direct probe waiting half of that for an ack
//     before 3 other members probe indirectly (IndirectChecks) until the interval ends;
//   - a failed probe makes the member suspect; it is declared dead after
//     SuspicionMult × max(1, log10 N) × ProbeInterval = 9 × T/10 for N ≤ 10 members,
//     unless it refutes the suspicion first. The earliest declaration is therefore a probe
//     sent just as the silence began, failing T/10 later, plus 9T/10: T. The latest, for
//     N ≤ 10, is about T + 2 × T/10 plus gossip. Above 10 members memberlist lengthens the
//     suspicion by log10 N (×1.6 at 40, ×2 at 100): a larger cluster takes longer to spread a
//     suspicion to the member that must refute it.
//   - Lifeguard: a suspicion starts at SuspicionMaxTimeoutMult (2) times that and shortens to
//     it as SuspicionMult−2 other members confirm it, when there are that many; a member that
//     alone suspects others (cut off, or losing packets) waits twice as long before it
//     declares them dead. A member whose own probes fail probes less often, up to
//     AwarenessMaxMultiplier (4) times the interval: it trusts its own view less.
//   - A suspicion is gossiped a few times within a fraction of a second and then only
//     carried on probes of the suspect: a member cut off for a second or two sends its
//     suspicions of the others into the void, and, back, would declare them dead at the end
//     of the timeout without their knowing. A full state exchange every T/5
//     (PushPullInterval; memberlist lengthens it above 32 members) hands its suspicions to
//     a member that spreads them, and the suspects refute them in time. For the same reason
//     the awareness multiplier is 4, not memberlist's 8: a member back from isolation probes,
//     and carries its suspicions to, one member every 0.4 T at the slowest.
func DetectorFor(timeout time.Duration) Detector {
	pi := timeout / detectorSteps
	return Detector{
		ProbeInterval:           pi,
		ProbeTimeout:            pi / 2,
		SuspicionMult:           detectorSteps - 1,
		SuspicionMaxTimeoutMult: 2,
		IndirectChecks:          3,
		AwarenessMaxMultiplier:  4,
		PushPullInterval:        timeout / 5,
	}
}

// CheckNodeTimeout says what is wrong with a node timeout.
func CheckNodeTimeout(d time.Duration) error {
	if d < MinNodeTimeout || d > MaxNodeTimeout {
		return fmt.Errorf("%w: node timeout %s out of range %s..%s", ErrConfig, d, MinNodeTimeout, MaxNodeTimeout)
	}
	return nil
}

func (p Profile) String() string {
	switch p {
	case LAN:
		return "lan"
	case Local:
		return "local"
	}
	return fmt.Sprintf("profile(%d)", int(p))
}

// Config configures a member. Name, Token and either BindAddr or AdvertiseAddr are the
// fields most callers set.
type Config struct {
	Name string // unique among alive members; the host name in the agent

	BindAddr string // IP to listen on, UDP and TCP; "" means 0.0.0.0
	BindPort int    // 0 picks a free port (the same one for UDP and TCP)

	// AdvertiseAddr is the IP other members reach this one on. "" means BindAddr when that
	// is a specific address, else the address memberlist picks (a private IP of this host).
	// It is never 0.0.0.0 or ::, and a loopback address only ever joins loopback peers.
	AdvertiseAddr string
	AdvertisePort int // 0 means the bound port; with BindPort 0 always the bound port

	Token string // the cluster token; the gossip encryption key derives from it

	Profile Profile
	// NodeTimeout is how long a member may be silent before it is declared dead; the failure
	// detector derives from it (DetectorFor). 0 means the profile's: DefaultNodeTimeout for
	// LAN, LocalNodeTimeout for Local. Set it the same on every member.
	NodeTimeout time.Duration
	Logger      *zap.Logger // nil means no logs
	Meta        Meta        // the first metadata; UpdateMeta changes it

	// EventBuffer bounds the events channel; events beyond it are dropped and counted.
	// 0 means 1024.
	EventBuffer int
	// JoinAttempts is how many times Join tries before giving up; 0 means 5.
	JoinAttempts int
	// RejoinInterval is how often peers given to Join that are not alive members are
	// joined again, so a healed partition merges; 0 means the profile's (30 s LAN, 1 s Local),
	// a negative value turns rejoining off.
	RejoinInterval time.Duration
	// MetricSink, when set, receives memberlist's own metrics (go-metrics)
	// of this member alone; nil drops them.
	MetricSink gometrics.MetricSink
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("cluster: bad config")

// SecretKey derives the 32-byte AES-256 gossip key from a cluster token with HKDF-SHA256.
func SecretKey(token string) ([]byte, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: a cluster token is required", ErrConfig)
	}
	return hkdf.Key(sha256.New, []byte(token), nil, keyInfo, 32)
}

// profileConfig returns memberlist's config for a profile and a node timeout (0: the
// profile's), and the profile's rejoin interval.
func profileConfig(p Profile, timeout time.Duration) (*memberlist.Config, time.Duration, error) {
	var c *memberlist.Config
	var rejoin time.Duration
	switch p {
	case LAN:
		c = memberlist.DefaultLANConfig()
		c.GossipInterval = 100 * time.Millisecond
		// A member that came back on another address may take its name once the old one
		// has been dead for this long.
		c.DeadNodeReclaimTime = 5 * time.Second
		rejoin = 30 * time.Second
		if timeout == 0 {
			timeout = DefaultNodeTimeout
		}
	case Local:
		c = memberlist.DefaultLocalConfig()
		c.GossipInterval = 50 * time.Millisecond
		c.TCPTimeout = time.Second
		c.DeadNodeReclaimTime = time.Second
		rejoin = time.Second
		if timeout == 0 {
			timeout = LocalNodeTimeout
		}
	default:
		return nil, 0, fmt.Errorf("%w: unknown profile %d", ErrConfig, int(p))
	}
	if err := CheckNodeTimeout(timeout); err != nil {
		return nil, 0, err
	}
	d := DetectorFor(timeout)
	c.ProbeInterval, c.ProbeTimeout = d.ProbeInterval, d.ProbeTimeout
	c.SuspicionMult, c.SuspicionMaxTimeoutMult = d.SuspicionMult, d.SuspicionMaxTimeoutMult
	c.IndirectChecks, c.AwarenessMaxMultiplier = d.IndirectChecks, d.AwarenessMaxMultiplier
	c.PushPullInterval = d.PushPullInterval
	return c, rejoin, nil
}

// checkAdvertise is the advertise rule: a member never advertises an unspecified address
// (0.0.0.0, ::), and a member advertising a loopback address joins only peers on loopback,
// which can reach it; a peer on another host could not.
func checkAdvertise(local, peer net.IP) error {
	if local == nil || local.IsUnspecified() {
		return fmt.Errorf("%w: advertise address %v is not one peers can reach; set an advertise address", ErrConfig, local)
	}
	if peer != nil && local.IsLoopback() && !peer.IsLoopback() {
		return fmt.Errorf("%w: advertise address %v is loopback but peer %v is not; set an advertise address peers can reach", ErrConfig, local, peer)
	}
	return nil
}

func parseIP(field, s string) (net.IP, error) {
	ip := net.ParseIP(s)
	if ip == nil {
		return nil, fmt.Errorf("%w: %s %q is not an IP address", ErrConfig, field, s)
	}
	return ip, nil
}

// memberlistConfig checks c and builds memberlist's config from it (delegates not set).
func (c Config) memberlistConfig() (*memberlist.Config, time.Duration, error) {
	if c.Name == "" {
		return nil, 0, fmt.Errorf("%w: a member name is required", ErrConfig)
	}
	if len(c.Name) > 128 {
		return nil, 0, fmt.Errorf("%w: member name longer than 128 bytes", ErrConfig)
	}
	if err := c.Meta.validate(); err != nil {
		return nil, 0, err
	}
	key, err := SecretKey(c.Token)
	if err != nil {
		return nil, 0, err
	}
	mc, rejoin, err := profileConfig(c.Profile, c.NodeTimeout)
	if err != nil {
		return nil, 0, err
	}
	for _, p := range []struct {
		field string
		port  int
	}{{"bind port", c.BindPort}, {"advertise port", c.AdvertisePort}} {
		if p.port < 0 || p.port > 65535 {
			return nil, 0, fmt.Errorf("%w: %s %d out of range", ErrConfig, p.field, p.port)
		}
	}
	mc.Name = c.Name
	mc.Label = Label
	mc.SecretKey = key
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.BindAddr = "0.0.0.0"
	var bind net.IP
	if c.BindAddr != "" {
		if bind, err = parseIP("bind address", c.BindAddr); err != nil {
			return nil, 0, err
		}
		mc.BindAddr = c.BindAddr
	}
	mc.BindPort = c.BindPort
	switch {
	case c.AdvertiseAddr != "":
		adv, err := parseIP("advertise address", c.AdvertiseAddr)
		if err != nil {
			return nil, 0, err
		}
		if err := checkAdvertise(adv, nil); err != nil {
			return nil, 0, err
		}
		mc.AdvertiseAddr = c.AdvertiseAddr
	case bind != nil && !bind.IsUnspecified():
		mc.AdvertiseAddr = c.BindAddr
	case mc.BindAddr == "0.0.0.0":
		// memberlist would pick this private IP itself but advertise it in 16 bytes, and a
		// given IPv4 address in 4; it compares addresses bytewise, so a node started once
		// each way would conflict with itself. Given, it is always advertised in 4 bytes.
		ip, err := sockaddr.GetPrivateIP()
		if err != nil || ip == "" {
			return nil, 0, fmt.Errorf("%w: no private IP address found to advertise (%v); set an advertise address", ErrConfig, err)
		}
		mc.AdvertiseAddr = ip
	}
	mc.AdvertisePort = c.AdvertisePort
	if mc.AdvertisePort == 0 {
		// With BindPort 0 memberlist advertises the port it bound.
		mc.AdvertisePort = c.BindPort
	}
	if c.RejoinInterval != 0 {
		rejoin = c.RejoinInterval
	}
	return mc, rejoin, nil
}
