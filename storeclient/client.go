// Package storeclient is the connection agents, launchers and workers make
// to a store: its three gRPC services, and the keepalive both ends agree on.
package storeclient

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storewire"
)

// Client is a connection to a store.
type Client struct {
	musterv1.AgentsClient
	musterv1.JobsClient
	musterv1.KVClient
	musterv1.ReplicasClient
	conn *grpc.ClientConn
	// moves, when set, is the connection's resolver, which Move updates.
	moves *manual.Resolver
	// leader follows a replicated store's leader (leader.go); nil for a
	// client that cannot move.
	leader *leaderState
}

// Dial connects to the store at addr: host:port, or unix:///path for a
// store's Unix socket. It does not wait for the store: the first call does.
// Keepalive pings notice a store that stopped answering within seconds.
func Dial(addr string, sec security.Security) (*Client, error) {
	return dial(addr, sec, storewire.KeepaliveTimeout)
}

// DialAgent connects an agent to the store at addr. Its keepalive pings wait
// longer for an answer than a launcher's: a store busy with thousands of
// nodes may answer late, and a live agent taken for dead fails its jobs.
//
// Over TCP the client can follow the store to another address (Move): a
// head node that dies is replaced by a store on another node.
func DialAgent(addr string, sec security.Security) (*Client, error) {
	if security.IsUnixAddr(addr) {
		return dial(addr, sec, storewire.AgentKeepaliveTimeout)
	}
	return dialMovable(addr, nil, sec, storewire.AgentKeepaliveTimeout, grpc.WithContextDialer(unackedDialer(AgentUnackedAfter)))
}

// DialCluster connects a launcher to a cluster's store at addr (host:port),
// or unix:///path, as Dial does. Over TCP the client follows a replicated
// store's leader: replicas are its replicas' addresses, when known.
func DialCluster(addr string, replicas []string, sec security.Security) (*Client, error) {
	if security.IsUnixAddr(addr) {
		return Dial(addr, sec)
	}
	return dialMovable(addr, replicas, sec, storewire.KeepaliveTimeout)
}

// dialMovable dials a client that can Move, and follows a replicated
// store's leader.
func dialMovable(addr string, replicas []string, sec security.Security, pingTimeout time.Duration, extra ...grpc.DialOption) (*Client, error) {
	// A resolver of the client's own hands the connection its address; the
	// certificate is verified against that address, not the first one.
	r := manual.NewBuilderWithScheme(movableScheme)
	r.InitialState(storeState(addr))
	l := &leaderState{addr: addr, replicas: replicas, moved: make(chan struct{})}
	opts := append([]grpc.DialOption{grpc.WithResolvers(r), grpc.WithChainUnaryInterceptor(l.unary), grpc.WithChainStreamInterceptor(l.stream)}, extra...)
	c, err := dial(r.Scheme()+":///"+addr, sec, pingTimeout, opts...)
	if err != nil {
		return nil, err
	}
	c.moves, c.leader, l.moves = r, l, r
	return c, nil
}

// movableScheme names the resolver of a client that can move.
const movableScheme = "muster-store"

func storeState(addr string) resolver.State {
	return resolver.State{Addresses: []resolver.Address{{Addr: addr, ServerName: addr}}}
}

// Move points the client at the store at addr (host:port): calls made from
// now on go there. Only a client DialAgent made over TCP moves.
func (c *Client) Move(addr string) error {
	if c.moves == nil {
		return fmt.Errorf("store connection over a Unix socket cannot move to %s", addr)
	}
	c.leader.move(addr)
	return nil
}

// DialInProcess connects to a store in this same process (the embedded
// default), without keepalive pings: a suspended process (Ctrl-Z) cannot
// answer them, and would lose its own store when it resumed.
func DialInProcess(addr string, sec security.Security) (*Client, error) {
	return dial(addr, sec, 0)
}

// dial connects to addr; a positive pingTimeout turns keepalive pings on.
func dial(addr string, sec security.Security, pingTimeout time.Duration, extra ...grpc.DialOption) (*Client, error) {
	store := strings.TrimPrefix(addr, movableScheme+":///")
	opts, err := sec.DialOptions(store)
	if err != nil {
		return nil, err
	}
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(storewire.MaxMessageBytes)),
		// A store that comes back (restarted) is reached within a few
		// seconds, not after gRPC's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}, MinConnectTimeout: 5 * time.Second}))
	if pingTimeout > 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: storewire.KeepaliveTime, Timeout: pingTimeout, PermitWithoutStream: true}))
	}
	conn, err := grpc.NewClient(addr, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", store, err)
	}
	return NewClient(conn), nil
}

// NewClient speaks the store's three services over conn, a connection the
// caller made (Dial makes its own). Close closes conn.
func NewClient(conn *grpc.ClientConn) *Client {
	return &Client{AgentsClient: musterv1.NewAgentsClient(conn), JobsClient: musterv1.NewJobsClient(conn),
		KVClient: musterv1.NewKVClient(conn), ReplicasClient: musterv1.NewReplicasClient(conn), conn: conn}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Connected says whether the connection to the store is up now: a call
// made while it is not waits for a new one.
func (c *Client) Connected() bool { return c.conn.GetState() == connectivity.Ready }

// Ping asks the store whether it answers, through gRPC's health service.
func (c *Client) Ping(ctx context.Context) error {
	_, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// Get reads a key of the worker's job, waiting for it when wait is set. The
// job is the one whose credential the client was dialled with
// (security.Security.JobToken).
func (c *Client) Get(ctx context.Context, key string, wait bool) ([]byte, error) {
	resp, err := c.KVGet(ctx, &musterv1.KVGetRequest{Key: key, Wait: wait})
	if err != nil {
		return nil, err
	}
	return resp.GetValue(), nil
}

// ErrorMessage is an error from a store call in one line a person can act
// on: without gRPC's framing, and a store that cannot be reached named with
// what to check.
func ErrorMessage(err error) string {
	s, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	msg := s.Message()
	// gRPC quotes the cause of a failed connection: connection error: desc = "...".
	if q, found := strings.CutPrefix(msg, "connection error: desc = "); found {
		if uq, err := strconv.Unquote(q); err == nil {
			msg = uq
		}
	}
	if m, found := strings.CutPrefix(msg, "transport: authentication handshake failed: "); found {
		return m // security words verification errors itself (handshake.go)
	}
	if m, found := strings.CutPrefix(msg, "transport: Error while dialing: "); found {
		return dialMessage(m)
	}
	// A TLS store closes a plain connection, or resets it when the bytes it
	// read are still unread on its side.
	if msg == "error reading server preface: EOF" || msg == "error reading server preface: connection reset by peer" {
		return "the store closed the connection before answering: if it serves TLS, give --tls-ca its CA"
	}
	return msg
}

// dialMessage words a failed dial, "dial tcp ADDR: connect: CAUSE".
func dialMessage(m string) string {
	network, rest, ok := strings.Cut(strings.TrimPrefix(m, "dial "), " ")
	addr, cause, ok2 := strings.Cut(rest, ": ")
	if !strings.HasPrefix(m, "dial ") || !ok || !ok2 {
		return "cannot reach the store: " + m
	}
	if i := strings.LastIndex(cause, ": "); i >= 0 {
		cause = cause[i+2:] // "connect: connection refused": the last cause says it
	}
	hint := ""
	switch {
	case network == "unix":
		hint = "; is an agent running on this machine?"
	case strings.Contains(cause, "connection refused"):
		hint = "; is an agent with --listen running there?"
	case strings.Contains(cause, "no route to host") || strings.Contains(cause, "i/o timeout") || strings.Contains(cause, "network is unreachable"):
		hint = "; is the machine up, and is the port open in its firewall?"
	}
	return "cannot reach the store at " + addr + ": " + cause + hint
}

// LeaderOf says whether err is a store replica's refusal of a call only the
// leader of a replicated store takes, and the leader's address it named
// ("" while no replica leads).
func LeaderOf(err error) (leader string, refused bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return "", false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == storewire.NotLeaderReason {
			return info.GetMetadata()["leader"], true
		}
	}
	return "", false
}
