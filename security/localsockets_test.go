package security_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/musterhq/muster/security"
)

// MUSTER_SOCKET replaces the sockets a launcher looks at, the system's
// included: a launcher given one never reaches another agent.
func TestLocalAgentSockets(t *testing.T) {
	own := "/run/user/1000/muster/agent.sock"
	if os.Geteuid() == 0 {
		own = security.SystemSocket
	}
	defaults := slices.Compact([]string{own, security.SystemSocket})
	for _, tt := range []struct {
		name, socket string
		want         []string
	}{
		{"defaults", "", defaults},
		{"MUSTER_SOCKET alone", "/tmp/muster-test/agent.sock", []string{"/tmp/muster-test/agent.sock"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
			t.Setenv("MUSTER_SOCKET", tt.socket)
			if got := security.LocalAgentSockets(); !slices.Equal(got, tt.want) {
				t.Errorf("LocalAgentSockets() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFindLocalAgentAtMusterSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	t.Setenv("MUSTER_SOCKET", path)
	if got := security.FindLocalAgent(); got != "" {
		t.Fatalf("no socket at %s: FindLocalAgent() = %q, want none", path, got)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if got, want := security.FindLocalAgent(), security.SocketAddr(path); got != want {
		t.Fatalf("FindLocalAgent() = %q, want %q", got, want)
	}
}
