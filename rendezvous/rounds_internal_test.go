package rendezvous

import (
	"fmt"
	"testing"

	"go.uber.org/zap/zaptest"
)

func TestRoundTransitions(t *testing.T) {
	drawn := map[[2]roundState]bool{
		{roundWaiting, roundReserving}: true, {roundWaiting, roundEnded}: true,
		{roundReserving, roundRunning}: true, {roundReserving, roundEnded}: true,
		{roundRunning, roundStopping}: true, {roundRunning, roundEnded}: true,
		{roundStopping, roundEnded}: true,
	}
	all := []roundState{roundWaiting, roundReserving, roundRunning, roundStopping, roundEnded}
	s := NewStore(StoreConfig{Logger: zaptest.NewLogger(t)})
	for _, from := range all {
		for _, to := range all {
			t.Run(fmt.Sprintf("%s to %s", from, to), func(t *testing.T) {
				j := &job{id: "j", events: newEventLog(100, 1<<20), round: &round{state: from}}
				ok := s.setRoundStateLocked(j, to)
				if ok != drawn[[2]roundState{from, to}] {
					t.Fatalf("allowed = %v", ok)
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
