package rendezvous

import (
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// A job taken over from its agents' reports shows when its workers started
// and when the last one exited, by the agents' word, not when the store
// came back; an exit heard live ends it when it is heard.
func TestRebuiltJobKeepsItsAgentsTimes(t *testing.T) {
	started, exitedAt := time.UnixMilli(1_700_000_000_000), time.UnixMilli(1_700_000_060_000)
	for _, tt := range []struct {
		name      string
		reported  bool // the exit came in the report, not live
		wantEnded func(now time.Time) time.Time
	}{
		{"exit reported", true, func(time.Time) time.Time { return exitedAt }},
		{"exit heard live", false, func(now time.Time) time.Time { return now }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := exitedAt.Add(time.Hour)
			s := NewStore(StoreConfig{Clock: func() time.Time { return now }})
			defer s.Close()
			rank := &musterv1.RankState{Rank: 0}
			ex := &musterv1.WorkerExited{Rank: 0, ExitCode: 0}
			if tt.reported {
				rank.Exited, rank.Acked, rank.ExitedUnixMs = ex, true, exitedAt.UnixMilli()
			}
			job := &musterv1.RunningJob{JobId: "j-0123456789ab", RoundId: "j-0123456789ab-r0", JobToken: "j-0123456789ab.secret",
				Spec: &musterv1.JobSpec{Argv: [][]byte{[]byte("x")}, Nnodes: 1, Nproc: 1}, NodeRank: 0, Nnodes: 1, Nproc: 1, WorldSize: 1,
				Ranks: []*musterv1.RankState{rank}, StartedUnixMs: started.UnixMilli(), StoreId: "st-earlier"}
			session, err := s.Register(&musterv1.Node{Name: "a", Addr: "10.0.0.1", Rank: -1}, "key", []*musterv1.RunningJob{job}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.reported {
				if _, err := s.Publish(t.Context(), session, 0, []*musterv1.JobEvent{{JobId: job.JobId,
					Event: &musterv1.JobEvent_Exited{Exited: ex}}}); err != nil {
					t.Fatal(err)
				}
			}
			jobs := s.Jobs()
			if len(jobs) != 1 || jobs[0].GetState() != musterv1.JobState_JOB_STATE_SUCCEEDED {
				t.Fatalf("jobs: %v", jobs)
			}
			if got := jobs[0].GetStartedUnixMs(); got != started.UnixMilli() {
				t.Errorf("started %d, want the agent's %d", got, started.UnixMilli())
			}
			if got, want := jobs[0].GetEndedUnixMs(), tt.wantEnded(now).UnixMilli(); got != want {
				t.Errorf("ended %d, want %d", got, want)
			}
		})
	}
}
