// Package security is how the store and its clients know each other: the
// cluster token, job credentials, TLS certificates, and the Unix socket whose
// callers the kernel names (peer credentials).
package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Security is how a store and its clients authenticate. Over TCP every call
// carries the cluster token (the cluster operator) or a job's credential (a
// worker of that job), over TLS when certificates are given. On the store's
// Unix socket the kernel names the caller instead (see peercred.go).
type Security struct {
	Token string
	// JobToken is a worker's job credential (MUSTER_JOB_TOKEN), client side.
	JobToken string
	// CertFile and KeyFile are the server's certificate (server side).
	CertFile, KeyFile string
	// CAFile verifies the server (client side); empty uses the system roots.
	CAFile string
	// TLS turns TLS on for clients even without a CAFile.
	TLS bool
}

// The call headers that carry the cluster token and a job credential.
const (
	TokenHeader    = "authorization"
	JobTokenHeader = "muster-job-token"
)

// CheckListen refuses a TCP listen address that is not loopback unless the
// cluster has a token and TLS: an agent runs the commands it is sent, and the
// token must not cross a network in clear text.
func CheckListen(addr string, sec Security) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if IsLoopback(host) {
		return nil
	}
	switch {
	case sec.Token == "" && sec.CertFile == "":
		return fmt.Errorf("refusing to listen on %s without a cluster token and TLS: anyone who reaches it could run commands here; "+
			"set --token-file (or MUSTER_TOKEN) and --tls-cert/--tls-key (see launcher certs), or listen on 127.0.0.1", addr)
	case sec.CertFile == "":
		return fmt.Errorf("refusing to listen on %s without TLS: the cluster token would cross the network in clear text; "+
			"pass --tls-cert and --tls-key (see launcher certs), or listen on 127.0.0.1", addr)
	}
	return nil
}

// IsLoopback reports whether host is a loopback address or "localhost".
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// IsUnixAddr reports whether addr names a Unix socket (unix:///path).
func IsUnixAddr(addr string) bool { return strings.HasPrefix(addr, "unix:") }

// TCPCredentials is how the store's TCP listener handshakes: TLS when a
// certificate is given.
func (sec Security) TCPCredentials() (credentials.TransportCredentials, error) {
	if sec.CertFile == "" && sec.KeyFile == "" {
		return insecure.NewCredentials(), nil
	}
	cert, err := tls.LoadX509KeyPair(sec.CertFile, sec.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", sec.CertFile, sec.KeyFile, err)
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}), nil
}

// headerCreds sends a credential with every call.
type headerCreds struct {
	header, value string
	secure        bool
}

func (h headerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{h.header: h.value}, nil
}

func (h headerCreds) RequireTransportSecurity() bool { return h.secure }

// DialOptions are the credentials a client dials addr with.
func (sec Security) DialOptions(addr string) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if IsUnixAddr(addr) {
		// The kernel tells the store who is calling; the cluster token is
		// not needed there and is not handed to whoever serves the socket.
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if sec.JobToken != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(headerCreds{header: JobTokenHeader, value: sec.JobToken}))
		}
		return opts, nil
	}
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
		opts = append(opts, grpc.WithTransportCredentials(verifyCreds{TransportCredentials: credentials.NewTLS(cfg), caFile: sec.CAFile}))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	host, _, _ := net.SplitHostPort(addr)
	// A credential must not cross a network in clear text; loopback is fine.
	needTLS := secure || !IsLoopback(host)
	if sec.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(headerCreds{header: TokenHeader, value: "Bearer " + sec.Token, secure: needTLS}))
	}
	if sec.JobToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(headerCreds{header: JobTokenHeader, value: sec.JobToken, secure: needTLS}))
	}
	return opts, nil
}
