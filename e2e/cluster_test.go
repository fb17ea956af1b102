package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

func TestSecureClusterNeedsTokenAndTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r := runLauncher(t, "certs", "--dir", dir, "127.0.0.1"); r.code != 0 {
		t.Fatalf("certs: %s", r.stderr)
	}
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	ca := filepath.Join(dir, "ca.pem")
	addr := startAgentWith(t, []string{"--token-file", tokenFile, "--tls-cert", filepath.Join(dir, "store.pem"), "--tls-key", filepath.Join(dir, "store-key.pem")},
		"--token-file", tokenFile, "--tls-ca", ca)

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"token and CA", []string{"--token-file", tokenFile, "--tls-ca", ca}, 0, "[0] ok"},
		{"no token", []string{"--tls-ca", ca}, 1, "missing or wrong cluster token"},
		{"no TLS", []string{"--token-file", tokenFile}, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"run", "--cluster", addr}, tt.args...), "--", "echo", "ok")
			r := runLauncher(t, args...)
			if r.code != tt.code || !strings.Contains(r.stdout+r.stderr, tt.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and %q", r.code, r.stdout, r.stderr, tt.code, tt.want)
			}
		})
	}
}

func TestAgentRefusesOpenAddressWithoutToken(t *testing.T) {
	// No token file: the tests' own would be found.
	out, err := runAgentOnceEnv(t, []string{"MUSTER_TOKEN_FILE=" + filepath.Join(t.TempDir(), "none")}, "--listen", "0.0.0.0:0")
	if err == nil || !strings.Contains(out, "refusing to listen on 0.0.0.0:0 without a cluster token") {
		t.Fatalf("agent on 0.0.0.0 without token: %v\n%s", err, out)
	}
}

func TestNodesJobsCancel(t *testing.T) {
	t.Parallel()
	addr := startAgent(t)
	marker := fmt.Sprintf("MUSTER_E2E_MARK=%d-cancel", time.Now().UnixNano())
	cmd, out, errb := launcher(t, nil, "run", "--cluster", addr, "--nproc", "2", "-x", marker, "--", "sleep", "1000")
	testwait.Until(t, 20*time.Second, "2 workers", func() bool { return len(jobProcesses(t, marker)) == 2 })

	nodes := runLauncher(t, "nodes", "--cluster", addr)
	if nodes.code != 0 || !strings.Contains(nodes.stdout, "127.0.0.1") {
		t.Fatalf("nodes: %d %q %q", nodes.code, nodes.stdout, nodes.stderr)
	}
	jobs := runLauncher(t, "jobs", "--cluster", addr)
	var running string
	for _, l := range strings.Split(jobs.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "running" && strings.Contains(l, "sleep 1000") {
			running = f[0]
		}
	}
	if running == "" {
		t.Fatalf("no running job listed:\n%s", jobs.stdout)
	}
	if r := runLauncher(t, "cancel", "--cluster", addr, running); r.code != 0 {
		t.Fatalf("cancel: %s", r.stderr)
	}
	r := wait(t, cmd, out, errb)
	if r.code != 143 || !strings.Contains(r.stderr, "cancelled by launcher cancel") {
		t.Fatalf("cancelled job: exit %d, stderr %q", r.code, r.stderr)
	}
	if pids := jobProcesses(t, marker); len(pids) != 0 {
		t.Fatalf("workers left: %v", pids)
	}
	// A job that ended is left as it is, and the launcher says so.
	if r := runLauncher(t, "cancel", "--cluster", addr, running); r.code != 0 ||
		r.stderr != "launcher: job "+running+" had already ended (cancelled): nothing to cancel\n" {
		t.Fatalf("cancel of an ended job: %d %q", r.code, r.stderr)
	}
	if r := runLauncher(t, "cancel", "--cluster", addr, "j-nonexistent"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("cancel of an unknown job: %d %q", r.code, r.stderr)
	}
}
