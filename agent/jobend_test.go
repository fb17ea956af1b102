package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/testwait"
)

// However a job ends on a node, every step of its start that was done is
// undone once, last first.
func TestJobEndUndoesEveryStep(t *testing.T) {
	// The steps that have an undo, last first.
	all := []string{"pipes and PMI sockets", "PMI service", "log files", "cgroups", "commands", "stdin", "job directory", "ports"}
	cancel := func(t *testing.T, tc *agenttest.Cluster, job string) {
		if _, err := tc.Client.Cancel(context.Background(), &musterv1.CancelRequest{JobId: job, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	shutdown := func(t *testing.T, tc *agenttest.Cluster, job string) {
		if err := tc.Agents[0].Close(time.Second); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		script string
		// failStep is a step of the start made to fail, if any: its log
		// files cannot be opened.
		failStep string
		// end ends the job once its worker is ready; nil: it ends by itself.
		end  func(t *testing.T, tc *agenttest.Cluster, job string)
		want []string
	}{
		{name: "normal end", script: "echo ready", want: all},
		{name: "worker failure", script: "echo ready; exit 3", want: all},
		{name: "stop", script: "echo ready; exec sleep 1000", end: cancel, want: all},
		{name: "agent shutdown", script: "echo ready; exec sleep 1000", end: shutdown, want: all},
		{name: "start failure", script: "echo ready", failStep: "log files", want: all[2:]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := agenttest.NewCluster(t, 1, nil)
			logDir := t.TempDir()
			var mu sync.Mutex
			var undone []string
			agent.SetStepHook(tc.Agents[0], func(job, step string) {
				if step == tt.failStep {
					if err := os.Mkdir(filepath.Join(logDir, job, "rank-0.log"), 0o755); err != nil {
						t.Error(err)
					}
				}
			})
			agent.SetUndoHook(tc.Agents[0], func(job, step string) {
				mu.Lock()
				defer mu.Unlock()
				undone = append(undone, step)
			})
			ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
			defer stop()
			sub, err := tc.Client.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
				Argv: args("sh", "-c", tt.script), Nnodes: 1, KillTimeoutMs: 1000, LogDir: []byte(logDir)}})
			if err != nil {
				t.Fatal(err)
			}
			if tt.end != nil {
				w, err := tc.Client.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: sub.JobId})
				if err != nil {
					t.Fatal(err)
				}
				for {
					ev, err := w.Recv()
					if err != nil {
						t.Fatalf("job stream ended before its worker was ready: %v", err)
					}
					if strings.TrimSpace(string(ev.GetOutput().GetData())) == "ready" {
						break
					}
				}
				tt.end(t, tc, sub.JobId)
			}
			// The round's ports are the first step, undone last.
			testwait.Until(t, 10*time.Second, "the job's last undo", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(undone, "ports")
			})
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(undone, tt.want) {
				t.Fatalf("undone: %q\nwant %q", undone, tt.want)
			}
		})
	}
}
