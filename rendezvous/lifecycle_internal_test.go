package rendezvous

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// testLoss is a node loss for tests that remove a node by hand.
var testLoss = &musterv1.NodeLoss{Signal: musterv1.LossSignal_LOSS_SIGNAL_LEFT, Detail: "test"}

// newStrictStore is a store for a test that fails the test on any state
// change its tables refuse. edits may change its configuration first.
func newStrictStore(t *testing.T, edits ...func(*StoreConfig)) *Store {
	t.Helper()
	var mu sync.Mutex
	var refused []error
	cfg := StoreConfig{Logger: zaptest.NewLogger(t), Refused: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		refused = append(refused, err)
	}}
	for _, edit := range edits {
		edit(&cfg)
	}
	s := NewStore(cfg)
	// Registered before Close, so it runs after it.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range refused {
			t.Errorf("refused: %v", err)
		}
	})
	t.Cleanup(s.Close)
	return s
}

func TestRoundTransitions(t *testing.T) {
	drawn := map[[2]roundState]bool{
		{roundWaiting, roundReserving}: true, {roundWaiting, roundEnded}: true,
		{roundReserving, roundRunning}: true, {roundReserving, roundEnded}: true,
		{roundRunning, roundStopping}: true, {roundRunning, roundEnded}: true,
		{roundStopping, roundEnded}: true,
	}
	all := []roundState{roundWaiting, roundReserving, roundRunning, roundStopping, roundEnded}
	for _, from := range all {
		for _, to := range all {
			t.Run(fmt.Sprintf("%s to %s", from, to), func(t *testing.T) {
				var heard []error
				s := NewStore(StoreConfig{Logger: zaptest.NewLogger(t), Refused: func(err error) { heard = append(heard, err) }})
				j := &job{id: "j", events: newEventLog(100, 1<<20), round: &round{state: from},
					state: from.jobState()}
				err := s.setRoundStateLocked(j, to)
				ok := err == nil
				if ok != drawn[[2]roundState{from, to}] {
					t.Fatalf("allowed = %v (%v)", ok, err)
				}
				if ok != (len(heard) == 0) {
					t.Fatalf("refusals heard: %v, allowed %v", heard, ok)
				}
				if want := from; ok {
					want = to
					if j.round.state != want {
						t.Fatalf("state %s, want %s", j.round.state, want)
					}
				} else if j.round.state != want {
					t.Fatalf("a refused step changed the state to %s", j.round.state)
				}
				if ok && to != roundEnded && j.state != to.jobState() {
					t.Fatalf("job state %v, want %v", j.state, to.jobState())
				}
			})
		}
	}
}

func TestJobTransitions(t *testing.T) {
	const (
		none      = musterv1.JobState_JOB_STATE_UNSPECIFIED
		pending   = musterv1.JobState_JOB_STATE_PENDING
		running   = musterv1.JobState_JOB_STATE_RUNNING
		stopping  = musterv1.JobState_JOB_STATE_STOPPING
		succeeded = musterv1.JobState_JOB_STATE_SUCCEEDED
		failed    = musterv1.JobState_JOB_STATE_FAILED
		cancelled = musterv1.JobState_JOB_STATE_CANCELLED
	)
	drawn := map[musterv1.JobState][]musterv1.JobState{
		none:     {pending, running},
		pending:  {running, failed, cancelled},
		running:  {stopping, succeeded, failed, cancelled},
		stopping: {pending, failed, cancelled},
	}
	all := []musterv1.JobState{none, pending, running, stopping, succeeded, failed, cancelled}
	for _, from := range all {
		for _, to := range all {
			if from == to {
				continue
			}
			t.Run(fmt.Sprintf("%s to %s", from, to), func(t *testing.T) {
				var heard []error
				s := NewStore(StoreConfig{Logger: zaptest.NewLogger(t), Refused: func(err error) { heard = append(heard, err) }})
				j := &job{id: "j", events: newEventLog(100, 1<<20), state: from}
				err := s.setJobStateLocked(j, to)
				want := slices.Contains(drawn[from], to)
				if (err == nil) != want || (len(heard) == 0) != want {
					t.Fatalf("err %v, refusals heard %v; want allowed %v", err, heard, want)
				}
				if got := j.state; want && got != to || !want && got != from {
					t.Fatalf("state %s after the step", got)
				}
			})
		}
	}
}

// The first cause of a job's end wins: a later one changes neither its
// state nor its code nor its summary.
func TestOutcomeDecidedOnce(t *testing.T) {
	ex := &musterv1.WorkerExited{Rank: 3, Node: "a", ExitCode: 7}
	tests := []struct {
		name      string
		first     outcome
		wantState musterv1.JobState
		wantCode  int32
	}{
		{"worker failed", outcome{kind: workerFailed, failure: ex, reason: "rank 3 failed"}, musterv1.JobState_JOB_STATE_FAILED, 7},
		{"cancelled", outcome{kind: cancelled, code: 130, reason: "Ctrl-C"}, musterv1.JobState_JOB_STATE_CANCELLED, 130},
		{"not run", outcome{kind: notRun, code: 1, reason: "no nodes"}, musterv1.JobState_JOB_STATE_FAILED, 1},
		{"node lost", outcome{kind: nodeLost, failure: &musterv1.WorkerExited{Error: "node lost"}}, musterv1.JobState_JOB_STATE_FAILED, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStrictStore(t)
			j := &job{id: "j", events: newEventLog(100, 1<<20)}
			if !s.decideLocked(j, tt.first) {
				t.Fatal("the first outcome was not taken")
			}
			if s.decideLocked(j, outcome{kind: cancelled, code: 143, reason: "later"}) {
				t.Fatal("a second outcome was taken")
			}
			if got := j.outcome.state(); got != tt.wantState {
				t.Errorf("state %s, want %s", got, tt.wantState)
			}
			if got := j.outcome.exitCode(); got != tt.wantCode {
				t.Errorf("exit code %d, want %d", got, tt.wantCode)
			}
			if j.outcome.reason != tt.first.reason {
				t.Errorf("reason %q, want %q", j.outcome.reason, tt.first.reason)
			}
		})
	}
}
