package launch

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A job on hosts node-2 and node-0 waits for node-2, which is listed but not
// there yet, never takes node-1, and gives node-2 node rank 0 once it comes.
func TestRunWaitsForListedHost(t *testing.T) {
	tc := agenttest.NewCluster(t, 2, nil) // node-0 on 127.0.0.2, node-1 on 127.0.0.3
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		code, err := Run(context.Background(), zaptest.NewLogger(t), tc.Client, Options{
			Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte("echo $MUSTER_NODE_RANK $MASTER_ADDR")},
				Nnodes: 2, Hosts: []string{"node-2", "node-0"}, WaitTimeoutMs: time.Minute.Milliseconds(), KillTimeoutMs: 1000},
			Stdout: &stdout, Stderr: &stderr, TagOutput: true,
		})
		if err != nil {
			t.Error(err)
		}
		done <- code
	}()
	const waiting = "muster: waiting for nodes: 1 of 2 ready (node-0); 1 missing; not usable: listed host node-2 is not registered"
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), waiting) {
		if time.Now().After(deadline) {
			t.Fatalf("no progress naming node-2; stderr:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	tc.AddAgent(t, nil) // node-2 on 127.0.0.4
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the launcher did not end; stderr:\n%s", stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	sort.Strings(lines)
	if got := strings.Join(lines, "|"); got != "[0] 0 127.0.0.4|[1] 1 127.0.0.4" {
		t.Fatalf("stdout %q", stdout.String())
	}
}
