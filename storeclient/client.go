// Package storeclient is the connection agents, launchers and workers make
// to a store: its three gRPC services, and the keepalive both ends agree on.
package storeclient

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
)

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

// Client is a connection to a store.
type Client struct {
	musterv1.AgentsClient
	musterv1.JobsClient
	musterv1.KVClient
	conn *grpc.ClientConn
}

// Dial connects to the store at addr: host:port, or unix:///path for a
// store's Unix socket. It does not wait for the store: the first call does.
// Keepalive pings notice a store that stopped answering within seconds.
func Dial(addr string, sec security.Security) (*Client, error) {
	return dial(addr, sec, KeepaliveTimeout)
}

// DialAgent connects an agent to the store at addr. Its keepalive pings wait
// longer for an answer than a launcher's: a store busy with thousands of
// nodes may answer late, and a live agent taken for dead fails its jobs.
func DialAgent(addr string, sec security.Security) (*Client, error) {
	return dial(addr, sec, AgentKeepaliveTimeout)
}

// DialInProcess connects to a store in this same process (the embedded
// default), without keepalive pings: a suspended process (Ctrl-Z) cannot
// answer them, and would lose its own store when it resumed.
func DialInProcess(addr string, sec security.Security) (*Client, error) {
	return dial(addr, sec, 0)
}

// dial connects to addr; a positive pingTimeout turns keepalive pings on.
func dial(addr string, sec security.Security, pingTimeout time.Duration) (*Client, error) {
	opts, err := sec.DialOptions(addr)
	if err != nil {
		return nil, err
	}
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
		// A store that comes back (restarted) is reached within a few
		// seconds, not after gRPC's default backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}, MinConnectTimeout: 5 * time.Second}))
	if pingTimeout > 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: KeepaliveTime, Timeout: pingTimeout, PermitWithoutStream: true}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", addr, err)
	}
	return NewClient(conn), nil
}

// NewClient speaks the store's three services over conn, a connection the
// caller made (Dial makes its own). Close closes conn.
func NewClient(conn *grpc.ClientConn) *Client {
	return &Client{AgentsClient: musterv1.NewAgentsClient(conn), JobsClient: musterv1.NewJobsClient(conn),
		KVClient: musterv1.NewKVClient(conn), conn: conn}
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

// ErrorMessage is an error from a store call without gRPC's framing.
func ErrorMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}
