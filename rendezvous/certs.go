package rendezvous

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
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

// GenerateCerts writes a new CA and a store certificate signed by it, valid
// for hosts (names or IP addresses), into dir: ca.pem, store.pem and
// store-key.pem. Agents serve store.pem; launchers and agents that join
// verify it with ca.pem.
func GenerateCerts(dir string, hosts []string, valid time.Duration) (CertFiles, error) {
	files := CertFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "store.pem"), Key: filepath.Join(dir, "store-key.pem")}
	if len(hosts) == 0 {
		return files, fmt.Errorf("certs: name at least one host the store is reached by")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return files, fmt.Errorf("certs: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "muster cluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(valid),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return files, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "muster store"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(valid),
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
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), f.mode); err != nil {
			return files, fmt.Errorf("certs: %w", err)
		}
	}
	return files, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
