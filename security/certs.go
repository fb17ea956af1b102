package security

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CertFiles names what GenerateCerts writes.
type CertFiles struct {
	CA, Cert, Key string
}

// GenerateCerts writes a store certificate valid for hosts (names or IP
// addresses) into dir: store.pem and store-key.pem, signed by the CA of
// ca.pem and ca-key.pem there, which it makes first when dir has none.
// Agents serve store.pem; launchers and agents that join verify it with
// ca.pem. The CA's key is kept, so that a store on another node (a new head
// node) gets a certificate that every node already trusts.
func GenerateCerts(dir string, hosts []string, valid time.Duration) (CertFiles, error) {
	now := time.Now()
	caFile, caKeyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	ca, caKey, err := loadCA(caFile, caKeyFile)
	switch {
	case err == nil:
		notAfter := now.Add(valid)
		if ca.NotAfter.Before(notAfter) {
			notAfter = ca.NotAfter // no certificate outlives its CA
		}
		return writeCerts(dir, hosts, ca, ca.PublicKey, caKey, notAfter)
	case !errors.Is(err, fs.ErrNotExist):
		return CertFiles{}, err
	case fileExists(caFile):
		return CertFiles{}, fmt.Errorf("certs: %s has no CA key beside it (%s), so no certificate its nodes trust can be made; "+
			"make new certificates in an empty --dir and give every node the new ca.pem", caFile, caKeyFile)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CertFiles{}, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "muster cluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(valid),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	if caTmpl.Raw, err = x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key); err != nil {
		return CertFiles{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return CertFiles{}, err
	}
	// Not private: ca.pem in it is for every user; the key files are 0600.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return CertFiles{}, fmt.Errorf("certs: %w", err)
	}
	if err := os.WriteFile(caKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return CertFiles{}, fmt.Errorf("certs: %w", err)
	}
	return writeCerts(dir, hosts, caTmpl, &key.PublicKey, key, now.Add(valid))
}

// loadCA reads a CA certificate and its key.
func loadCA(certFile, keyFile string) (*x509.Certificate, any, error) {
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("certs: %s or %s holds no PEM block", certFile, keyFile)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %s: %w", certFile, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %s: %w", keyFile, err)
	}
	return ca, key, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// tokenCAInfo is HKDF's info string for a token's CA key; changing it
// changes every such CA.
const tokenCAInfo = "muster/v1 store CA"

// GenerateTokenCerts is GenerateCerts with a CA every holder of the cluster
// token derives alike (TokenCA): nodes that share only the token verify the
// store without copying a CA file, and nobody without the token can make a
// certificate they trust.
func GenerateTokenCerts(dir, token string, hosts []string) (CertFiles, error) {
	ca, key, err := TokenCA(token)
	if err != nil {
		return CertFiles{}, err
	}
	return writeCerts(dir, hosts, ca, ca.PublicKey, key, ca.NotAfter)
}

// TokenCA derives a CA certificate and key from the cluster token: an
// Ed25519 key from HKDF-SHA256, and fixed fields, so that the certificate
// is the same bytes on every node.
func TokenCA(token string) (*x509.Certificate, ed25519.PrivateKey, error) {
	if token == "" {
		return nil, nil, fmt.Errorf("certs: a CA from the cluster token needs the token")
	}
	seed, err := hkdf.Key(sha256.New, []byte(token), nil, tokenCAInfo, ed25519.SeedSize)
	if err != nil {
		return nil, nil, err
	}
	key := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "muster cluster CA (from the cluster token)"},
		NotBefore:             time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

// writeCerts writes the CA made from caTmpl (self-signed unless it was
// parsed already) and a store certificate for hosts signed by caKey.
func writeCerts(dir string, hosts []string, caTmpl *x509.Certificate, caPub, caKey any, notAfter time.Time) (CertFiles, error) {
	files := CertFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "store.pem"), Key: filepath.Join(dir, "store-key.pem")}
	if len(hosts) == 0 {
		return files, fmt.Errorf("certs: name at least one host the store is reached by")
	}
	// The certificates are public (workers of every user read the CA
	// through MUSTER_TLS_CA); only the key is private.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return files, fmt.Errorf("certs: %w", err)
	}
	caDER := caTmpl.Raw
	if caDER == nil {
		var err error
		if caDER, err = x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caPub, caKey); err != nil {
			return files, err
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "muster store"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return files, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return files, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return files, err
	}
	for _, f := range []struct {
		path, kind string
		der        []byte
		mode       os.FileMode
	}{
		{files.CA, "CERTIFICATE", caDER, 0o644},
		{files.Cert, "CERTIFICATE", der, 0o644},
		{files.Key, "EC PRIVATE KEY", keyDER, 0o600},
	} {
		if err := writeNew(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), f.mode); err != nil {
			return files, fmt.Errorf("certs: %w", err)
		}
	}
	return files, nil
}

// writeNew writes data to a new file of mode at path, in place of any there:
// an old key file readable by others never receives the new key.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// WriteTokenCA writes the token's CA certificate (TokenCA) to path, for a
// node that joins a store whose certificate it signed.
func WriteTokenCA(path, token string) error {
	ca, _, err := TokenCA(token)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
