package rendezvous

import (
	"testing"

	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// recordingStore is a strict store that keeps every command it applies.
func recordingStore(t *testing.T) (*Store, func() []Command) {
	var log []Command
	s := newStrictStore(t, func(c *StoreConfig) { c.Applied = func(c Command) { log = append(log, c) } })
	return s, func() []Command {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]Command(nil), log...)
	}
}

// agentCommands takes what the store queued for a session's agent.
func agentCommands(t *testing.T, s *Store, session string) []*musterv1.AgentCommand {
	t.Helper()
	out, _, err := s.Commands(session)
	if err != nil {
		t.Fatal(err)
	}
	return out.Take()
}

func exited(job string, rank, code int32) *musterv1.JobEvent {
	return &musterv1.JobEvent{JobId: job, Event: &musterv1.JobEvent_Exited{Exited: &musterv1.WorkerExited{Rank: rank, ExitCode: code}}}
}

// The job table is what its commands make it: a second store that applies
// the first one's commands in order holds the same jobs, in the same
// states, with the same rounds, and sends its agents the same assignments,
// NCCL unique IDs included. Two nodes run a job that fails once and
// restarts, then succeeds, and a second job is cancelled while it runs.
func TestReplayRebuildsTheJobTable(t *testing.T) {
	s, commands := recordingStore(t)
	sessions := map[string]string{}
	for name, addr := range map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"} {
		sess, err := s.Register(&musterv1.Node{Name: name, Addr: addr, Rank: -1}, "key-"+name, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions[name] = sess
	}
	var starts []*musterv1.Assignment
	// run answers node rank 0's request for ports and returns the round's
	// assignments, which it keeps for the comparison.
	run := func(job string) {
		t.Helper()
		var res *musterv1.ReservePorts
		for _, c := range agentCommands(t, s, sessions["a"]) {
			if r := c.GetReservePorts(); r != nil && r.GetJobId() == job {
				res = r
			}
		}
		if res == nil {
			t.Fatalf("job %s: node rank 0 was not asked for ports", job)
		}
		if err := s.PortsReserved(sessions["a"], res.GetRoundId(), []int32{29500, 29501}, ""); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b"} {
			for _, c := range agentCommands(t, s, sessions[name]) {
				if a := c.GetStart(); a != nil {
					starts = append(starts, a)
				}
			}
		}
	}
	publish := func(node string, evs ...*musterv1.JobEvent) {
		t.Helper()
		if _, err := s.Publish(t.Context(), sessions[node], 0, evs); err != nil {
			t.Fatal(err)
		}
	}

	spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 2, Nproc: 2, MaxRestarts: 1, KillTimeoutMs: 1000}
	job, err := s.Submit(spec, &musterv1.Identity{Uid: 1000, Gid: 1000}, "")
	if err != nil {
		t.Fatal(err)
	}
	run(job)
	publish("b", exited(job, 2, 3))                        // fails round 0: a restart
	publish("a", exited(job, 0, 143), exited(job, 1, 143)) // stopped for it
	publish("b", exited(job, 3, 143))
	run(job)
	publish("a", exited(job, 0, 0), exited(job, 1, 0))
	publish("b", exited(job, 2, 0), exited(job, 3, 0))

	other, err := s.Submit(proto.CloneOf(spec), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	run(other)
	if _, err := s.Cancel(other, false, "cancelled by the test", 130); err != nil {
		t.Fatal(err)
	}
	publish("a", exited(other, 0, 143), exited(other, 1, 143))
	publish("b", exited(other, 2, 143), exited(other, 3, 143))

	log := commands()
	replica, _ := recordingStore(t)
	for i, c := range log {
		if _, err := replica.Apply(c); err != nil {
			t.Fatalf("command %d (%T): %v", i, c, err)
		}
	}
	want := []struct {
		id    string
		state musterv1.JobState
		code  int32
		round int32
	}{
		{job, musterv1.JobState_JOB_STATE_SUCCEEDED, 0, 2},
		{other, musterv1.JobState_JOB_STATE_CANCELLED, 130, 1},
	}
	for _, w := range want {
		got, again := s.Job(w.id), replica.Job(w.id)
		if got.GetState() != w.state || got.GetExitCode() != w.code || got.GetRounds() != w.round {
			t.Errorf("job %s: %s, code %d, round %d; want %s, %d, %d", w.id, got.GetState(), got.GetExitCode(),
				got.GetRounds(), w.state, w.code, w.round)
		}
		if again.GetState() != got.GetState() || again.GetExitCode() != got.GetExitCode() ||
			again.GetRounds() != got.GetRounds() || again.GetSummary() != got.GetSummary() ||
			!proto.Equal(again.GetFailure(), got.GetFailure()) || again.GetRestarts() != got.GetRestarts() {
			t.Errorf("job %s replayed: %v\nwant %v", w.id, again, got)
		}
	}
	if len(starts) != 6 {
		t.Fatalf("%d assignments sent, want 6 (two nodes, three rounds)", len(starts))
	}
	var replayed []*musterv1.Assignment
	for _, sess := range sessions {
		for _, c := range agentCommands(t, replica, sess) {
			if a := c.GetStart(); a != nil {
				replayed = append(replayed, a)
			}
		}
	}
	for _, a := range starts {
		found := false
		for _, b := range replayed {
			found = found || proto.Equal(a, b)
		}
		if !found {
			t.Errorf("assignment of node rank %d, round %s not sent again by the replica", a.GetNodeRank(), a.GetRoundId())
		}
	}
}
