// Package storewire is what the store and its clients agree on over
// gRPC: keepalive times, message and list bounds, the reason a replica
// gives when it does not lead. Both ends import it; neither imports the
// other.
package storewire

import "time"

// Bounds on gRPC traffic. A launcher's pings take a store that does not
// answer within KeepaliveTimeout for gone. Agents wait longer
// (AgentKeepaliveTimeout): a store whose CPU is saturated, as when
// thousands of nodes register at once, answers late. The store sends no
// pings (a stopped launcher cannot answer them): it drops a peer whose TCP
// is silent for AgentKeepaliveTimeout. A dead agent is noticed sooner by
// its stream breaking or by gossip.
const (
	KeepaliveTime         = 5 * time.Second
	KeepaliveTimeout      = 5 * time.Second
	AgentKeepaliveTimeout = 30 * time.Second
	MaxMessageBytes       = 16 << 20
)

// MaxTorchConns bounds the connections to a job's TCPStore that one
// CheckTorchConns call, and so one CheckTorchConns command, asks about.
const MaxTorchConns = 1024

// MaxTorchConnReason bounds an agent's word on why it refuses such a
// connection.
const MaxTorchConnReason = 256

// NotLeaderReason is the ErrorInfo reason of a replica's refusal because it
// does not lead; its metadata's "leader" names the leader.
const NotLeaderReason = "NOT_LEADER"
