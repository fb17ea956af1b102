package rendezvous

import (
	"errors"
	"slices"
	"strings"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func hangClues(job, round string, ras *musterv1.RasAnswer, ranks ...*musterv1.RankClues) *musterv1.JobEvent {
	return &musterv1.JobEvent{JobId: job, Event: &musterv1.JobEvent_HangClues{HangClues: &musterv1.HangClues{RoundId: round, Ras: ras, Ranks: ranks}}}
}

// A hang found on node a, whose culprit runs on node b: the store asks b
// for its clues, gives the verdict once both gave theirs, and stops the job
// with b's rank named for the abort; clues about another node's ranks are
// refused.
func TestHangVerdictAcrossNodes(t *testing.T) {
	s, _ := recordingStore(t)
	sessions := map[string]string{}
	for name, addr := range map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"} {
		sess, err := s.Register(&musterv1.Node{Name: name, Addr: addr, Rank: -1}, "key-"+name, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions[name] = sess
	}
	spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("true")}, Nnodes: 2, Nproc: 2, KillTimeoutMs: 1000, HangTimeoutMs: 5000}
	job, err := s.Submit(spec, &musterv1.Identity{Uid: 1000, Gid: 1000}, "")
	if err != nil {
		t.Fatal(err)
	}
	var round string
	for _, c := range agentCommands(t, s, sessions["a"]) {
		if r := c.GetReservePorts(); r != nil {
			round = r.GetRoundId()
		}
	}
	if err := s.PortsReserved(sessions["a"], round, []int32{29500, 29501}, ""); err != nil {
		t.Fatal(err)
	}
	agentCommands(t, s, sessions["b"])
	publish := func(node string, ev *musterv1.JobEvent) error {
		_, err := s.Publish(t.Context(), sessions[node], 0, []*musterv1.JobEvent{ev})
		return err
	}

	beat := int64(1_800_000_000_000_000_000)
	silent := func(rank int32) *musterv1.RankClues {
		return &musterv1.RankClues{Rank: rank, Silent: true, SilentMs: 5050, TimeoutMs: 5000, LastBeatUnixNs: beat}
	}
	if err := publish("a", hangClues(job, round, nil, silent(3))); !errors.Is(err, ErrBadEvents) {
		t.Fatalf("node a's clues about rank 3 of node b: %v, want refused", err)
	}
	if err := publish("a", hangClues(job, round, &musterv1.RasAnswer{Asked: true, Answered: true, Elsewhere: 1}, silent(0), silent(1))); err != nil {
		t.Fatal(err)
	}
	asked := slices.ContainsFunc(agentCommands(t, s, sessions["b"]), func(c *musterv1.AgentCommand) bool {
		return c.GetCollectHangClues().GetRoundId() == round
	})
	if !asked {
		t.Fatal("node b was not asked for its clues")
	}
	if got := s.jobs[job].outcome.kind; got != undecided {
		t.Fatalf("decided (%v) before node b gave its clues", got)
	}
	ras := &musterv1.RasAnswer{Asked: true, Answered: true, Culprits: []*musterv1.RasCulprit{
		{Rank: 3, Communicator: "c0ffee", Op: "AllReduce", Launched: 20, OthersLaunched: 21}}}
	if err := publish("b", hangClues(job, round, ras, silent(2), silent(3))); err != nil {
		t.Fatal(err)
	}
	o := s.jobs[job].outcome
	if o.kind != workerFailed || o.failure.GetRank() != 3 || !slices.Equal(o.failure.GetHang().GetWaiting(), []int32{0, 1, 2}) {
		t.Fatalf("outcome %v failing rank %d, waiting %v; want rank 3 failed, 0, 1, 2 waiting", o.kind, o.failure.GetRank(), o.failure.GetHang().GetWaiting())
	}
	if !strings.Contains(o.reason, "rank 3 (node b, local rank 1) hung: it launched AllReduce only up to operation 20") || !strings.Contains(o.reason, "evidence: NCCL's RAS") {
		t.Errorf("summary %q", o.reason)
	}
	for _, name := range []string{"a", "b"} {
		stop := slices.IndexFunc(agentCommands(t, s, sessions[name]), func(c *musterv1.AgentCommand) bool {
			return slices.Equal(c.GetStop().GetAbortRanks(), []int32{3})
		})
		if stop < 0 {
			t.Errorf("node %s was not told to stop, aborting rank 3", name)
		}
	}
}
