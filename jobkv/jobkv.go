// Package jobkv is a worker's connection to its job's key-value space and
// barriers in muster's store, reached with the credential its agent gave it.
package jobkv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/envprop"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// The variables a worker reaches its job's KV and barriers with.
const (
	EnvStoreAddr = envprop.StoreAddr // host:port, or unix:///path
	EnvJobToken  = envprop.JobToken  // the job's credential
	EnvTLSCA     = envprop.TLSCA     // CA file of the store's TLS certificate, when it uses TLS
)

// jobTokenHeader carries the job credential; the store reads the job from it.
const jobTokenHeader = "muster-job-token"

// ErrKeyNotFound is returned by Get for a key the job has not set.
var ErrKeyNotFound = errors.New("key not found")

// Client is a worker's connection to its job's key-value space and
// barriers. The job is the one whose credential the worker was given: a
// worker reaches no other job's keys.
type Client struct {
	conn *grpc.ClientConn
	c    musterv1.KVClient
}

// Dial connects to the store the worker's environment names.
func Dial() (*Client, error) { return DialFromLookup(os.LookupEnv) }

// DialFromLookup connects to the store named by lookup's variables.
func DialFromLookup(lookup func(string) (string, bool)) (*Client, error) {
	addr, _ := lookup(EnvStoreAddr)
	token, _ := lookup(EnvJobToken)
	if addr == "" || token == "" {
		return nil, fmt.Errorf("%s and %s must be set: run under `launcher run`", EnvStoreAddr, EnvJobToken)
	}
	unixSocket := strings.HasPrefix(addr, "unix:")
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	tlsOn := false
	if ca, _ := lookup(EnvTLSCA); ca != "" && !unixSocket {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvTLSCA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%s: no PEM certificate in it", EnvTLSCA, ca)
		}
		opts[0] = grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))
		tlsOn = true
	}
	// The credential crosses no network in clear text: off a Unix socket or
	// loopback, gRPC refuses to send it without TLS.
	needTLS := tlsOn
	if !unixSocket {
		host, _, _ := net.SplitHostPort(addr)
		if a, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !a.IsLoopback()) {
			needTLS = true
		}
	}
	opts = append(opts, grpc.WithPerRPCCredentials(jobCreds{token: token, secure: needTLS}))
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", addr, err)
	}
	return &Client{conn: conn, c: musterv1.NewKVClient(conn)}, nil
}

type jobCreds struct {
	token  string
	secure bool
}

func (j jobCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{jobTokenHeader: j.token}, nil
}

func (j jobCreds) RequireTransportSecurity() bool { return j.secure }

// Close closes the connection.
func (s *Client) Close() error { return s.conn.Close() }

// Set stores value under key.
func (s *Client) Set(ctx context.Context, key string, value []byte) error {
	_, err := s.c.KVSet(ctx, &musterv1.KVSetRequest{Key: key, Value: value})
	return storeError(err)
}

// Get returns key's value, or ErrKeyNotFound.
func (s *Client) Get(ctx context.Context, key string) ([]byte, error) {
	resp, err := s.c.KVGet(ctx, &musterv1.KVGetRequest{Key: key})
	if err != nil {
		return nil, storeError(err)
	}
	return resp.GetValue(), nil
}

// Wait returns key's value once some worker of the job has set it, or an
// error when ctx ends first.
func (s *Client) Wait(ctx context.Context, key string) ([]byte, error) {
	req := &musterv1.KVGetRequest{Key: key, Wait: true}
	if d, ok := ctx.Deadline(); ok {
		req.TimeoutMs = max(1, time.Until(d).Milliseconds())
	}
	resp, err := s.c.KVGet(ctx, req)
	if err != nil {
		return nil, storeError(err)
	}
	return resp.GetValue(), nil
}

// Barrier returns once count distinct participants (ranks, usually) of the
// job have arrived at the barrier name, or an error when ctx ends first.
func (s *Client) Barrier(ctx context.Context, name, participant string, count int) error {
	req := &musterv1.BarrierRequest{Name: name, Participant: participant, Count: int32(count)}
	if d, ok := ctx.Deadline(); ok {
		req.TimeoutMs = max(1, time.Until(d).Milliseconds())
	}
	_, err := s.c.Barrier(ctx, req)
	return storeError(err)
}

func storeError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if st.Code() == codes.NotFound {
		return fmt.Errorf("%w: %s", ErrKeyNotFound, st.Message())
	}
	return fmt.Errorf("muster store: %s", st.Message())
}
