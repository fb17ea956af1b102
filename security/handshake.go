package security

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
)

// verifyCreds are a client's TLS credentials whose handshake errors say, in
// one line, which store and which CA file did not agree and what to do,
// instead of the verifier's chain of causes.
type verifyCreds struct {
	credentials.TransportCredentials
	caFile string
}

func (v verifyCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := v.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err != nil {
		err = handshakeError(err, authority, v.caFile)
	}
	return c, info, err
}

func (v verifyCreds) Clone() credentials.TransportCredentials {
	return verifyCreds{TransportCredentials: v.TransportCredentials.Clone(), caFile: v.caFile}
}

// handshakeError words a failed verification of the store at addr's
// certificate against caFile (the system's roots when empty).
func handshakeError(err error, addr, caFile string) error {
	trusted := "the CA in " + caFile
	if caFile == "" {
		trusted = "any CA this machine trusts"
	}
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("the store at %s presents a certificate not signed by %s; give --tls-ca the ca.pem that `launcher certs` wrote with the store's certificate", addr, trusted)
	case errors.As(err, &host):
		return fmt.Errorf("the store's certificate is not valid for %s (%v); make one that names it with: launcher certs %s", addr, host.Error(), hostOf(addr))
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Errorf("the store at %s presents an expired certificate; make a new one with launcher certs", addr)
	}
	return err
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
