package security_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musterhq/muster/security"
)

func TestResolveToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("0123456789abcdef\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("x\n"), 0o600)
	made := filepath.Join(dir, "made", "token")
	t.Setenv("HOME", dir) // no default token file of the user's
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	for _, tt := range []struct {
		name    string
		env     *string
		src     security.TokenSource
		want    string // "*" for any token of the minimum length
		created bool
		err     string
	}{
		{"nothing given", nil, security.TokenSource{}, "", false, ""},
		{"MUSTER_TOKEN wins over the file", ptr("fedcba9876543210"), security.TokenSource{File: good}, "fedcba9876543210", false, ""},
		{"MUSTER_TOKEN too short", ptr("x"), security.TokenSource{}, "", false, "MUSTER_TOKEN: token is 1 characters, want at least 16"},
		{"MUSTER_TOKEN, the file missing", ptr("0123456789abcdef"), security.TokenSource{File: "/nonexistent"}, "0123456789abcdef", false, ""},
		{"the file", nil, security.TokenSource{File: good}, "0123456789abcdef", false, ""},
		{"a short file", nil, security.TokenSource{File: short}, "", false, "--token-file " + short},
		{"a missing file", nil, security.TokenSource{File: "/nonexistent"}, "", false, "--token-file"},
		{"made when missing", nil, security.TokenSource{File: made, Create: true}, "*", true, ""},
		{"read once made", nil, security.TokenSource{File: made, Create: true}, "*", false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != nil {
				t.Setenv(security.EnvToken, *tt.env)
			} else {
				t.Setenv(security.EnvToken, "")
				os.Unsetenv(security.EnvToken)
			}
			tok, created, err := security.ResolveToken(tt.src)
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
			case err != nil:
				t.Fatal(err)
			case tt.want == "*" && len(tok) < security.MinTokenLength, tt.want != "*" && tok != tt.want:
				t.Fatalf("token %q, want %q", tok, tt.want)
			case created != tt.created:
				t.Fatalf("created %v, want %v", created, tt.created)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

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
