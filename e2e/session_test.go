package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// The store restarts in the middle of a job. An agent that hosts the store
// (--listen) cannot restart its store without restarting itself and ending
// its own jobs, so the job runs on a second agent joined with --store, and
// the first one is stopped and started again on the same address, as
// systemd would restart it. The joined agent keeps the job's worker running
// and registers again; the launcher follows the job on the new store and
// exits with the job's code.
func TestJobOutlivesAStoreRestart(t *testing.T) {
	t.Parallel()
	listen := "127.0.0.1:" + strconv.Itoa(testfixture.FreePort(t))
	host := startAgentAt(t, listen, []string{"--name", "head"})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Node rank 0: the job lands here, not on the agent that hosts the store.
	joined := exec.CommandContext(ctx, agentBin, "--store", host.addr, "--name", "joined", "--addr", "127.0.0.2", "--node-rank", "0")
	joined.Env = agentEnv()
	var log bytes.Buffer
	joined.Stdout, joined.Stderr = &log, &log
	if err := joined.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { joined.Process.Signal(syscall.SIGTERM); joined.Wait() })
	testwait.Until(t, 20*time.Second, "the second agent to join", func() bool {
		return strings.Contains(runLauncher(t, "nodes", "--cluster", host.addr).stdout, "joined")
	})

	dir := t.TempDir()
	script := fmt.Sprintf(`echo before; touch %[1]s/started; while [ ! -e %[1]s/go ]; do sleep 0.05; done; echo after; exit 5`, dir)
	cmd, out, errb := launcher(t, nil, "run", "--cluster", host.addr, "--", "sh", "-c", script)
	testwait.Until(t, 20*time.Second, "the job to run", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })

	host.cmd.Process.Signal(syscall.SIGTERM)
	host.cmd.Wait()
	startAgentAt(t, listen, []string{"--name", "head"})
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)

	r := wait(t, cmd, out, errb)
	if r.code != 5 || !strings.Contains(r.stderr, "restarted while job") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s\nagent:\n%s", r.code, r.stdout, r.stderr, log.String())
	}
	if !strings.Contains(r.stdout, "[0] after") {
		t.Errorf("output written after the restart is missing; stdout:\n%s", r.stdout)
	}
	if joined.ProcessState != nil || !strings.Contains(log.String(), "registered with the store again") {
		t.Fatalf("the joined agent did not stay and register again:\n%s", log.String())
	}
}
