package security_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musterhq/muster/security"
)

func TestTokenMinimumLength(t *testing.T) {
	t.Setenv(security.EnvToken, "x")
	if _, err := security.LoadToken(""); err == nil || !strings.Contains(err.Error(), "MUSTER_TOKEN: token is 1 characters, want at least 16") {
		t.Fatalf("MUSTER_TOKEN=x: %v", err)
	}
	t.Setenv(security.EnvToken, "0123456789abcdef")
	if tok, err := security.LoadToken("/nonexistent"); err != nil || tok != "0123456789abcdef" {
		t.Fatalf("MUSTER_TOKEN of 16: %q %v", tok, err)
	}
	os.Unsetenv(security.EnvToken)
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte("x\n"), 0o600)
	if _, err := security.LoadToken(short); err == nil {
		t.Fatal("a one-character token file was accepted")
	}
}

func TestEnsureTokenFileCreatesAPrivateToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "muster", "token")
	tok, created, err := security.EnsureTokenFile(path)
	if err != nil || !created || len(tok) < security.MinTokenLength {
		t.Fatalf("first start: %q %v %v", tok, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, %v; want 0600", fi.Mode(), err)
	}
	again, created, err := security.EnsureTokenFile(path)
	if err != nil || created || again != tok {
		t.Fatalf("second start: %q %v %v; want the same token", again, created, err)
	}
}
