package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/storeserver"
)

// A store restarted in the middle of a job: the launcher follows the job on
// the new store, says output may be missing, and exits with the job's code.
func TestLauncherFollowsAJobAcrossAStoreRestart(t *testing.T) {
	tc := agenttest.NewCluster(t, 2, nil)
	dir := t.TempDir()
	script := fmt.Sprintf(`touch %[1]s/started-$RANK; while [ ! -e %[1]s/go ]; do sleep 0.02; done; echo "rank $RANK after"; [ "$RANK" = 1 ] && exit 7; exit 0`, dir)
	var stdout, stderr bytes.Buffer
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := Run(context.Background(), zaptest.NewLogger(t), tc.Client, Options{
			Spec:   &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte(script)}, Nnodes: 2, Nproc: 1, KillTimeoutMs: 1000},
			Stdout: &stdout, Stderr: &stderr, Store: tc.Store.Addr(), Reattach: 20 * time.Second,
		})
		done <- result{code, err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		if len(m) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	addr := tc.Store.Addr()
	tc.Store.Close()
	rendezvoustest.NewStore(t, func(c *storeserver.Config) { c.ListenAddr = addr })
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	select {
	case r := <-done:
		if r.err != nil || r.code != 7 {
			t.Fatalf("exit %d, %v; stderr:\n%s", r.code, r.err, stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("the launcher did not end; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "restarted while job") {
		t.Fatalf("no word of the restart; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "rank 1 after") {
		t.Errorf("output written after the restart is missing; stdout:\n%s", stdout.String())
	}
}
