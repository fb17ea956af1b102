package security_test

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/musterhq/muster/security"
)

// A second store certificate made in the same directory is signed by the
// first one's CA: nodes that trust ca.pem trust a store on a new head node.
func TestGenerateCertsKeepsTheCA(t *testing.T) {
	dir := t.TempDir()
	first, err := security.GenerateCerts(dir, []string{"10.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caBefore, _ := os.ReadFile(first.CA)
	second, err := security.GenerateCerts(dir, []string{"10.0.0.2"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBefore)
	b, _ := os.ReadFile(second.Cert)
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Errorf("the new store's certificate is not trusted by the first ca.pem: %v", err)
	}
	if err := cert.VerifyHostname("10.0.0.2"); err != nil {
		t.Error(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "ca-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("ca-key.pem: %v, %v; want mode 0600", st, err)
	}
	// A ca.pem without its key cannot sign: said, not replaced.
	os.Remove(filepath.Join(dir, "ca-key.pem"))
	if _, err := security.GenerateCerts(dir, []string{"10.0.0.3"}, time.Hour); err == nil {
		t.Error("a CA without its key was replaced")
	}
}
