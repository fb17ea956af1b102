package rendezvous

import (
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// The back-off doubles with each restart up to its most, and starts again
// after a round that ran for backoffResetAfter.
func TestRestartBackoffDoublesAndResets(t *testing.T) {
	spec := &musterv1.JobSpec{RestartBackoffMs: 1000, RestartBackoffMaxMs: 30_000}
	j := &job{spec: spec, round: &round{}}
	s := NewStore(StoreConfig{})
	defer s.Close()
	var got []time.Duration
	for range 7 {
		j.round.runningSince = time.Now().Add(-time.Second)
		got = append(got, s.restartBackoffLocked(j))
	}
	j.round.runningSince = time.Now().Add(-backoffResetAfter)
	got = append(got, s.restartBackoffLocked(j))
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30, 1}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("back-offs %v, want %v seconds", got, want)
		}
	}
	if d := s.restartBackoffLocked(&job{spec: &musterv1.JobSpec{}, round: &round{}}); d != 0 {
		t.Fatalf("a job without --restart-backoff waits %s", d)
	}
}
