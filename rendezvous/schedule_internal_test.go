package rendezvous

import (
	"maps"
	"slices"
	"strings"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

const (
	schedNone     = musterv1.NodeSchedule_NODE_SCHEDULE_UNSPECIFIED
	schedCordoned = musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED
	schedDrained  = musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED
)

// registerNodes registers nodes without GPUs, named as given, and returns
// their sessions by name.
func registerNodes(t *testing.T, s *Store, names ...string) map[string]string {
	t.Helper()
	sessions := map[string]string{}
	for i, name := range names {
		sess, err := s.Register(&musterv1.Node{Name: name, Addr: "10.0.0." + string(rune('1'+i)), Rank: -1, Cpus: 4}, "key-"+name, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions[name] = sess
	}
	return sessions
}

func cpuSpec(nnodes int32, waitMs int64) *musterv1.JobSpec {
	return &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: nnodes, Nproc: 1, MaxRestarts: 1,
		KillTimeoutMs: 1000, WaitTimeoutMs: waitMs}
}

// waitingFor is what the job's waiting round last said of the nodes it
// cannot take; nil when its round does not wait.
func waitingFor(s *Store, id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.jobs[id].round
	if r.state != roundWaiting {
		return nil
	}
	return slices.Clone(r.progress.GetUnusable())
}

// New jobs and the operator's schedule: a cordoned or drained node takes no
// round of a job that never ran on it; a job that asks for more nodes than
// are left waits, and says why, or fails at once without a wait; an
// uncordoned node takes rounds again.
func TestScheduleBarsNewJobs(t *testing.T) {
	tests := []struct {
		name      string
		set       map[string]musterv1.NodeSchedule // applied in name order
		nnodes    int32
		waitMs    int64
		wantNodes []string // the round's nodes; nil: it waits
		wantWhy   string   // in the waiting round's progress, or the error
		wantErr   bool
	}{
		{name: "cordoned", set: map[string]musterv1.NodeSchedule{"a": schedCordoned}, nnodes: 1, waitMs: 60_000,
			wantNodes: []string{"b"}},
		{name: "drained", set: map[string]musterv1.NodeSchedule{"a": schedDrained}, nnodes: 1, waitMs: 60_000,
			wantNodes: []string{"b"}},
		{name: "uncordoned", set: map[string]musterv1.NodeSchedule{"a": schedNone, "b": schedNone}, nnodes: 2,
			waitMs: 60_000, wantNodes: []string{"a", "b"}},
		{name: "too few uncordoned: waits", set: map[string]musterv1.NodeSchedule{"a": schedCordoned}, nnodes: 2,
			waitMs: 60_000, wantWhy: "node a is cordoned"},
		{name: "too few undrained: waits", set: map[string]musterv1.NodeSchedule{"b": schedDrained}, nnodes: 2,
			waitMs: 60_000, wantWhy: "node b is drained"},
		{name: "too few, no wait: fails", set: map[string]musterv1.NodeSchedule{"a": schedCordoned}, nnodes: 2,
			wantWhy: "node a is cordoned", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStrictStore(t)
			registerNodes(t, s, "a", "b")
			for _, name := range slices.Sorted(maps.Keys(tt.set)) {
				// Uncordoning needs a cordon first.
				if tt.set[name] == schedNone {
					if _, _, err := s.SetSchedule(name, schedCordoned); err != nil {
						t.Fatal(err)
					}
				}
				if _, _, err := s.SetSchedule(name, tt.set[name]); err != nil {
					t.Fatal(err)
				}
			}
			id, err := s.Submit(cpuSpec(tt.nnodes, tt.waitMs), nil, "")
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.wantWhy) {
					t.Fatalf("submit: %v; want an error naming %q", err, tt.wantWhy)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantNodes == nil {
				why := waitingFor(s, id)
				if !slices.Contains(why, tt.wantWhy) {
					t.Fatalf("waiting round says %q; want %q", why, tt.wantWhy)
				}
				return
			}
			if got := jobNodes(t, s, id); !slices.Equal(got, tt.wantNodes) {
				t.Fatalf("round on %v; want %v", got, tt.wantNodes)
			}
		})
	}
}

// Running jobs and the operator's schedule: neither a cordon nor a drain
// stops a round; a cordoned node takes its jobs' next rounds again, a
// drained one does not; a waiting job takes a node the moment it is
// uncordoned.
func TestScheduleAndRunningJobs(t *testing.T) {
	tests := []struct {
		name      string
		sched     musterv1.NodeSchedule
		wantNodes []string // the next round's nodes after a restart
	}{
		{name: "cordoned: the restart comes back", sched: schedCordoned, wantNodes: []string{"a", "b"}},
		{name: "drained: the restart forms elsewhere", sched: schedDrained, wantNodes: []string{"b", "c"}},
		{name: "uncordoned", sched: schedNone, wantNodes: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStrictStore(t)
			sessions := registerNodes(t, s, "a", "b")
			id, err := s.Submit(cpuSpec(2, 60_000), nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := jobNodes(t, s, id); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("first round on %v", got)
			}
			agentCommands(t, s, sessions["a"]) // the round's request for ports
			prev, jobs, err := s.SetSchedule("a", tt.sched)
			if err != nil || prev != schedNone || !slices.Equal(jobs, []string{id}) {
				t.Fatalf("set: was %s, jobs %v, %v; want none, [%s]", prev, jobs, err, id)
			}
			for _, c := range agentCommands(t, s, sessions["a"]) {
				if c.GetStop() != nil {
					t.Fatalf("the schedule stopped the job: %v", c)
				}
			}
			if st := s.Job(id).GetState(); st.Ended() {
				t.Fatalf("job %s after the schedule", st)
			}
			registerNodes(t, s, "c")
			if _, err := s.Restart(id, "test"); err != nil {
				t.Fatal(err)
			}
			if got := jobNodes(t, s, id); !slices.Equal(got, tt.wantNodes) {
				t.Fatalf("next round on %v; want %v", got, tt.wantNodes)
			}
		})
	}
}

// A waiting job takes a node the moment it is uncordoned.
func TestUncordonFormsWaitingRound(t *testing.T) {
	s := newStrictStore(t)
	registerNodes(t, s, "a", "b")
	if _, _, err := s.SetSchedule("b", schedCordoned); err != nil {
		t.Fatal(err)
	}
	id, err := s.Submit(cpuSpec(2, 60_000), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if why := waitingFor(s, id); !slices.Contains(why, "node b is cordoned") {
		t.Fatalf("waiting round says %q", why)
	}
	if _, _, err := s.SetSchedule("b", schedNone); err != nil {
		t.Fatal(err)
	}
	if got := jobNodes(t, s, id); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("round on %v after the uncordon; want [a b]", got)
	}
}

// The schedule is the node's name's, not its registration's: an agent that
// registers again after its node was removed finds it as it was, the node
// list shows it in between, and it is uncordoned while away. A node the
// store never knew is refused.
func TestScheduleSurvivesRegistration(t *testing.T) {
	s := newStrictStore(t)
	sessions := registerNodes(t, s, "a", "b")
	if _, _, err := s.SetSchedule("a", schedDrained); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(&RemoveNode{Session: sessions["a"], Loss: testLoss}); err != nil {
		t.Fatal(err)
	}
	if st := listed(s, "a"); st.GetSchedule() != schedDrained || !st.GetNotRegistered() {
		t.Fatalf("away, listed as %v; want drained, not registered", st)
	}
	registerNodes(t, s, "a")
	if st := listed(s, "a"); st.GetSchedule() != schedDrained || st.GetNotRegistered() {
		t.Fatalf("back, listed as %v; want drained", st)
	}
	id, err := s.Submit(cpuSpec(1, 60_000), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := jobNodes(t, s, id); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("round on %v; want [b]", got)
	}
	if _, _, err := s.SetSchedule("nope", schedCordoned); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("cordon of an unknown node: %v", err)
	}
}

// Stats counts the operator's states: a drained node is draining while a
// job runs on it, drained once none does.
func TestScheduleStats(t *testing.T) {
	s := newStrictStore(t)
	registerNodes(t, s, "a", "b", "c")
	id, err := s.Submit(cpuSpec(1, 60_000), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, sched := range map[string]musterv1.NodeSchedule{"a": schedDrained, "b": schedDrained, "c": schedCordoned} {
		if _, _, err := s.SetSchedule(name, sched); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Nodes[NodeDraining] != 1 || st.Nodes[NodeDrained] != 1 || st.Nodes[NodeCordoned] != 1 {
		t.Fatalf("nodes by state %v; want one each draining, drained, cordoned (job %s)", st.Nodes, id)
	}
}

// The schedule is what its commands make it: a replica that applies the
// store's commands in order holds the same cordons and drains, and forms
// the same rounds.
func TestReplayRebuildsTheSchedule(t *testing.T) {
	s, commands := recordingStore(t)
	registerNodes(t, s, "a", "b", "c")
	steps := []struct {
		name  string
		sched musterv1.NodeSchedule
	}{
		{"a", schedCordoned}, {"b", schedDrained}, {"a", schedNone}, {"c", schedCordoned},
	}
	for _, st := range steps {
		if _, _, err := s.SetSchedule(st.name, st.sched); err != nil {
			t.Fatal(err)
		}
	}
	id, err := s.Submit(cpuSpec(1, 60_000), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	replica, _ := recordingStore(t)
	for i, c := range commands() {
		if _, err := replica.Apply(c); err != nil {
			t.Fatalf("command %d (%T): %v", i, c, err)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		if got, want := listed(replica, name).GetSchedule(), listed(s, name).GetSchedule(); got != want {
			t.Errorf("node %s replayed %s; want %s", name, got, want)
		}
	}
	if got, want := jobNodes(t, replica, id), jobNodes(t, s, id); !slices.Equal(got, want) || !slices.Equal(want, []string{"a"}) {
		t.Errorf("replayed round on %v, first on %v; want [a]", got, want)
	}
}
