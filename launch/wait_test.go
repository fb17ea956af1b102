package launch

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/testfixture"
	"github.com/musterhq/muster/testwait"
)

// testfixture.Buffer is a buffer that one goroutine writes while another reads.
func TestRunWaitsForNodes(t *testing.T) {
	tests := []struct {
		name string
		join bool // a second node joins while the job waits
		code int
		want []string // patterns, in order, of what the launcher prints on stderr
	}{
		{"a node joins", true, 0, []string{
			`^muster: waiting for nodes: 1 of 2 ready \(node-0\); 1 missing \(for up to 1m0s, --wait-timeout\)$`,
		}},
		{"nobody comes", false, 1, []string{
			`^muster: waiting for nodes: 1 of 2 ready \(node-0\); 1 missing \(for up to 1s, --wait-timeout\)$`,
			`^muster: job j-\w+ failed: waited 1s for nodes: 1 of 2 ready \(node-0\); 1 missing; exit code 1$`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := agenttest.NewCluster(t, 1, nil)
			wait := time.Second
			if tt.join {
				wait = time.Minute
			}
			var stdout, stderr testfixture.Buffer
			done := make(chan int, 1)
			go func() {
				code, err := Run(context.Background(), zaptest.NewLogger(t), tc.Client, Options{
					Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("sh"), []byte("-c"), []byte("echo $RANK of $WORLD_SIZE")},
						Nnodes: 2, WaitTimeoutMs: wait.Milliseconds(), KillTimeoutMs: 1000},
					Stdout: &stdout, Stderr: &stderr, TagOutput: true,
				})
				if err != nil {
					t.Error(err)
				}
				done <- code
			}()
			if tt.join {
				testwait.Until(t, 20*time.Second, "the launcher to say it waits for nodes", func() bool {
					return strings.Contains(stderr.String(), "waiting for nodes")
				})
				tc.AddAgent(t, nil)
			}
			var code int
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the launcher did not end; stderr:\n%s", stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if code != tt.code || len(lines) != len(tt.want) {
				t.Fatalf("exit code %d, stderr:\n%s", code, stderr.String())
			}
			for i, re := range tt.want {
				if !regexp.MustCompile(re).MatchString(lines[i]) {
					t.Errorf("stderr line %d: %q, want %q", i, lines[i], re)
				}
			}
			if tt.join && stdout.String() != "[0] 0 of 2\n[1] 1 of 2\n" && stdout.String() != "[1] 1 of 2\n[0] 0 of 2\n" {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}
