package rendezvous

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Security is how a store and its clients authenticate: a shared cluster
// token sent with every call, over TLS when certificates are given.
type Security struct {
	Token string
	// CertFile and KeyFile are the server's certificate (server side).
	CertFile, KeyFile string
	// CAFile verifies the server (client side); empty uses the system roots.
	CAFile string
	// TLS turns TLS on for clients even without a CAFile.
	TLS bool
}

const tokenHeader = "authorization"

// CheckListen refuses a listen address that is not loopback unless a token
// is set: an agent runs the commands it is sent.
func CheckListen(addr string, sec Security) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if IsLoopback(host) || sec.Token != "" {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without a cluster token: anyone who reaches it could run commands here; "+
		"set --token-file (or MUSTER_TOKEN), or listen on 127.0.0.1", addr)
}

// IsLoopback reports whether host is a loopback address or "localhost".
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

func (sec Security) serverOptions() ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	if sec.CertFile != "" || sec.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(sec.CertFile, sec.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", sec.CertFile, sec.KeyFile, err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})))
	}
	if sec.Token != "" {
		want := []byte("Bearer " + sec.Token)
		check := func(ctx context.Context) error {
			md, _ := metadata.FromIncomingContext(ctx)
			for _, got := range md.Get(tokenHeader) {
				if subtle.ConstantTimeCompare([]byte(got), want) == 1 {
					return nil
				}
			}
			return status.Error(codes.Unauthenticated, "missing or wrong cluster token")
		}
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := check(ctx); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := check(ss.Context()); err != nil {
					return err
				}
				return h(srv, ss)
			}))
	}
	return opts, nil
}

type tokenCreds struct {
	token  string
	secure bool
}

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{tokenHeader: "Bearer " + t.token}, nil
}

func (t tokenCreds) RequireTransportSecurity() bool { return t.secure }

func (sec Security) dialOptions(addr string) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	secure := sec.TLS || sec.CAFile != ""
	if secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13}
		if sec.CAFile != "" {
			pem, err := os.ReadFile(sec.CAFile)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", sec.CAFile)
			}
			cfg.RootCAs = pool
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if sec.Token != "" {
		host, _, _ := net.SplitHostPort(addr)
		// A token must not cross a network in clear text; loopback is fine.
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{token: sec.Token, secure: secure || !IsLoopback(host)}))
	}
	return opts, nil
}

// ReadToken reads a cluster token from a file, trimmed.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("--token-file %s: token is %d characters, want at least 16", path, len(tok))
	}
	return tok, nil
}
