package security_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/security"
)

// The CA certificate is public: every user's workers read it (MUSTER_TLS_CA)
// from the directory the token and the certificates share, /etc/muster. The
// store's key and the token are the operator's alone.
func TestPublicFilesPublicSecretsSecret(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: reads the files as another user")
	}
	top := t.TempDir()
	os.Chmod(filepath.Dir(top), 0o711)
	os.Chmod(top, 0o755)
	dir := filepath.Join(top, "etc", "muster")
	// The agent hosting the store makes the token at its first start, then
	// the operator makes the certificates beside it.
	if _, _, err := security.EnsureTokenFile(filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	files, err := security.GenerateCerts(dir, []string{"10.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path     string
		readable bool
	}{
		{files.CA, true},
		{files.Cert, true},
		{files.Key, false},
		{filepath.Join(dir, "token"), false},
	} {
		cmd := exec.Command("cat", tt.path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if (err == nil) != tt.readable {
			t.Errorf("%s read by another user: %v, want readable %v\n%s", filepath.Base(tt.path), err, tt.readable, out)
		}
	}
}

// A new key never lands in an old key file that others could read.
func TestCertsReplaceAKeyFileReadableByOthers(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "store-key.pem")
	os.WriteFile(key, []byte("old"), 0o644)
	if _, err := security.GenerateCerts(dir, []string{"10.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store-key.pem: %v %v, want mode 0600", fi.Mode(), err)
	}
}
