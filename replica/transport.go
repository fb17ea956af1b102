package replica

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"

	"github.com/musterhq/muster/security"
)

// Raft's traffic between replicas: TLS both ways with the cluster's CA,
// each side presenting its store certificate, then the cluster token's
// digest before raft's first byte. Plaintext is allowed only when every
// replica is on loopback; the digest is required always. A refused peer
// is logged on one line with its address.

// preamble starts every raft connection: magic, then the token's digest.
const preambleMagic = "MRAFT1"

const (
	preambleBytes   = len(preambleMagic) + sha256.Size
	preambleTimeout = 5 * time.Second
)

func tokenDigest(token string) []byte {
	d := sha256.Sum256([]byte("muster raft peer\x00" + token))
	return d[:]
}

// streamLayer is raft's network: a listener that admits only the cluster's
// replicas, and a dialer that proves this one is.
type streamLayer struct {
	net.Listener
	log    *zap.Logger
	digest []byte
	server *tls.Config // nil: plaintext (loopback only)
	client *tls.Config
}

// newStreamLayer listens on bind for raft traffic.
func newStreamLayer(log *zap.Logger, bind string, sec security.Security, loopback bool) (*streamLayer, error) {
	if sec.Token == "" {
		return nil, errors.New("replicas need the cluster token: their raft traffic is authenticated with it")
	}
	l := &streamLayer{log: log, digest: tokenDigest(sec.Token)}
	switch {
	case sec.CertFile != "":
		var err error
		if l.server, l.client, err = tlsConfigs(sec); err != nil {
			return nil, err
		}
	case !loopback:
		return nil, errors.New("replicas off loopback need TLS (--tls-cert, --tls-key): raft traffic never crosses a network in clear text")
	}
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("replica: raft listen on %s: %w", bind, err)
	}
	l.Listener = lis
	return l, nil
}

// tlsConfigs are the two sides' TLS settings: each replica presents its
// store certificate and verifies the other's against the CA (the CA file,
// or the one derived from the cluster token).
func tlsConfigs(sec security.Security) (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(sec.CertFile, sec.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("replica: %w", err)
	}
	pool := x509.NewCertPool()
	if sec.CAFile != "" {
		pem, err := os.ReadFile(sec.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("replica: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("replica: %s holds no certificate", sec.CAFile)
		}
	} else {
		ca, _, err := security.TokenCA(sec.Token)
		if err != nil {
			return nil, nil, err
		}
		pool.AddCert(ca)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("no certificate")
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		inter := x509.NewCertPool()
		for _, r := range raw[1:] {
			if c, err := x509.ParseCertificate(r); err == nil {
				inter.AddCert(c)
			}
		}
		// A replica's certificate is a store certificate of the cluster's CA.
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: verify, MinVersion: tls.VersionTLS13}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}
	return server, client, nil
}

// Accept returns the next connection whose peer proved it is a replica.
func (l *streamLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		conn, err := l.admit(c)
		if err != nil {
			l.log.Warn("raft peer refused", zap.String("peer", c.RemoteAddr().String()), zap.Error(err))
			c.Close()
			continue
		}
		return conn, nil
	}
}

// admit handshakes TLS and checks the token's digest, within a bound.
func (l *streamLayer) admit(c net.Conn) (net.Conn, error) {
	c.SetDeadline(time.Now().Add(preambleTimeout))
	if l.server != nil {
		tc := tls.Server(c, l.server)
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
		c = tc
	}
	b := make([]byte, preambleBytes)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, fmt.Errorf("no preamble: %w", err)
	}
	if string(b[:len(preambleMagic)]) != preambleMagic {
		return nil, errors.New("not a muster replica")
	}
	if subtle.ConstantTimeCompare(b[len(preambleMagic):], l.digest) != 1 {
		return nil, errors.New("wrong cluster token")
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// Dial connects to another replica's raft address and proves this one is.
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(timeout))
	if l.client != nil {
		host, _, _ := net.SplitHostPort(string(address))
		cfg := l.client.Clone()
		cfg.ServerName = host
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("replica %s: TLS: %w", address, err)
		}
		c = tc
	}
	if _, err := c.Write(append([]byte(preambleMagic), l.digest...)); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}
