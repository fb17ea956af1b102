package cluster

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// Label is set on every gossip packet and stream; members with another label ignore them.
const Label = "muster/v1"

// keyInfo is HKDF's info string for the gossip key; changing it changes every key.
const keyInfo = "muster/v1 memberlist gossip key"

// Profile picks memberlist's timing.
type Profile int

const (
	// LAN is for real networks, tuned for fast failure detection: probe every 250 ms with a
	// 100 ms timeout and a suspicion multiplier of 2 find a dead member in about 1.2 s.
	LAN Profile = iota
	// Local is for tests on one host: faster gossip, shorter TCP timeouts, quick rejoin.
	Local
)

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
	Logger  *zap.Logger // nil means no logs
	Meta    Meta        // the first metadata; UpdateMeta changes it

	// EventBuffer bounds the events channel; events beyond it are dropped and counted.
	// 0 means 1024.
	EventBuffer int
	// JoinAttempts is how many times Join tries before giving up; 0 means 5.
	JoinAttempts int
	// RejoinInterval is how often peers given to Join that are not alive members are
	// joined again, so a healed partition merges; 0 means the profile's (30 s LAN, 1 s Local),
	// a negative value turns rejoining off.
	RejoinInterval time.Duration
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

// profileConfig returns memberlist's config for a profile.
func profileConfig(p Profile) (*memberlist.Config, time.Duration, error) {
	switch p {
	case LAN:
		c := memberlist.DefaultLANConfig()
		c.ProbeInterval = 250 * time.Millisecond
		c.ProbeTimeout = 100 * time.Millisecond
		c.SuspicionMult = 2
		c.GossipInterval = 100 * time.Millisecond
		// A member that came back on another address may take its name once the old one
		// has been dead for this long.
		c.DeadNodeReclaimTime = 5 * time.Second
		return c, 30 * time.Second, nil
	case Local:
		c := memberlist.DefaultLocalConfig()
		c.ProbeInterval = 200 * time.Millisecond
		c.ProbeTimeout = 100 * time.Millisecond
		c.SuspicionMult = 3
		c.GossipInterval = 50 * time.Millisecond
		c.PushPullInterval = 2 * time.Second
		c.TCPTimeout = time.Second
		c.DeadNodeReclaimTime = time.Second
		return c, time.Second, nil
	}
	return nil, 0, fmt.Errorf("%w: unknown profile %d", ErrConfig, int(p))
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
	mc, rejoin, err := profileConfig(c.Profile)
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
