package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/agent/agenttest"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A job whose start is stuck on a node holds up no other job's start or
// stop there: each job's commands run apart from the others'.
func TestStopNotHeldByAnotherJobsStart(t *testing.T) {
	tc := agenttest.NewCluster(t, 1, nil)
	held, release := make(chan string, 1), make(chan struct{})
	var mu sync.Mutex
	stuck := ""
	agent.SetStepHook(tc.Agents[0], func(job, step string) {
		if step != "job directory" {
			return
		}
		mu.Lock()
		if stuck == "" {
			stuck = job
			held <- job
		}
		me := stuck == job
		mu.Unlock()
		if me {
			<-release
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submit := func(spec *musterv1.JobSpec) (string, musterv1.Jobs_WatchJobClient) {
		t.Helper()
		sub, err := tc.Client.Submit(ctx, &musterv1.SubmitRequest{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		w, err := tc.Client.WatchJob(ctx, &musterv1.WatchJobRequest{JobId: sub.JobId})
		if err != nil {
			t.Fatal(err)
		}
		return sub.JobId, w
	}
	// next returns the job's next output line or its end.
	next := func(w musterv1.Jobs_WatchJobClient) (string, *musterv1.JobFinished) {
		t.Helper()
		for {
			ev, err := w.Recv()
			if err != nil {
				t.Fatalf("job stream ended before the job: %v", err)
			}
			if o := ev.GetOutput(); o != nil {
				return strings.TrimSpace(string(o.Data)), nil
			}
			if f := ev.GetFinished(); f != nil {
				return "", f
			}
		}
	}

	jobA, watchA := submit(&musterv1.JobSpec{Argv: args("sh", "-c", "echo a done"), Nnodes: 1})
	select {
	case job := <-held:
		if job != jobA {
			t.Fatalf("held %s, want %s", job, jobA)
		}
	case <-ctx.Done():
		t.Fatal("job A's start never reached its job directory")
	}
	jobB, watchB := submit(&musterv1.JobSpec{Argv: args("sh", "-c", "echo ready; exec sleep 1000"), Nnodes: 1, KillTimeoutMs: 1000})
	if line, fin := next(watchB); line != "ready" {
		t.Fatalf("job B: %q %v, want its worker's line", line, fin)
	}
	if _, err := tc.Client.Cancel(ctx, &musterv1.CancelRequest{JobId: jobB, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	for {
		_, fin := next(watchB)
		if fin != nil {
			if fin.State != musterv1.JobState_JOB_STATE_CANCELLED {
				t.Fatalf("job B ended %v: %s", fin.State, fin.Summary)
			}
			break
		}
	}
	// Job A was held all along; once let go, it runs.
	close(release)
	var lines []string
	for {
		line, fin := next(watchA)
		if fin != nil {
			if fin.State != musterv1.JobState_JOB_STATE_SUCCEEDED || strings.Join(lines, "|") != "a done" {
				t.Fatalf("job A ended %v (%s) with output %q", fin.State, fin.Summary, lines)
			}
			break
		}
		lines = append(lines, line)
	}
}
