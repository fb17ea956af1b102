package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/musterhq/muster/testfixture"
)

// What goes wrong before a job runs is said in one line: what happened,
// which address or file, what to do.
func TestMessagesAPersonCanActOn(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldAddr := held.Addr().String()
	closed := "127.0.0.1:" + strconv.Itoa(testfixture.FreePort(t))
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("no store there", func(t *testing.T) {
		r := runLauncher(t, "run", "--cluster", closed, "--", "true")
		want := "cannot reach the store at " + closed + ": connection refused; is an agent with --listen running there?"
		if r.code == 0 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "transport:") {
			t.Errorf("exit %d, stderr:\n%s\nwant a line: %s", r.code, r.stderr, want)
		}
	})
	t.Run("gossip port in use", func(t *testing.T) {
		out, err := runAgentOnce(t, "--listen", "127.0.0.1:"+strconv.Itoa(testfixture.FreePort(t)), "--bind", heldAddr)
		want := "gossip port " + heldAddr + " is in use (another agent on this machine?): stop it, or give this agent --bind IP:PORT with a free port"
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("agent: %v, output:\n%s\nwant a line: %s", err, out, want)
		}
	})
	t.Run("log directory cannot be made", func(t *testing.T) {
		r := runLauncher(t, "run", "--log-dir", notDir, "--", "true")
		if r.code == 0 || strings.Contains(r.stderr, "logs to") || !strings.Contains(r.stderr, "--log-dir") {
			t.Errorf("exit %d, stderr:\n%s\nwant the --log-dir failure and no \"logs to\"", r.code, r.stderr)
		}
	})
}
