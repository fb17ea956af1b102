package hangcause_test

import (
	"slices"
	"testing"
	"time"

	"github.com/musterhq/muster/hangcause"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

const t0 = int64(1_800_000_000_000_000_000)

// beats are silent ranks' last heartbeats, offsets from t0.
func beats(offsets map[int32]time.Duration, silent bool) map[int32]*musterv1.RankClues {
	out := map[int32]*musterv1.RankClues{}
	for rank, d := range offsets {
		out[rank] = &musterv1.RankClues{Rank: rank, Silent: silent, LastBeatUnixNs: t0 + int64(d)}
	}
	return out
}

func recorder(pg string, seq int64, state string) []*musterv1.Collective {
	return []*musterv1.Collective{{ProcessGroup: pg, ProcessGroupName: "default_pg", Op: "nccl:all_reduce", Seq: seq, State: state}}
}

func oneNode(int32) int32 { return 0 }

func TestDecide(t *testing.T) {
	ms := time.Millisecond
	fourSilent := beats(map[int32]time.Duration{0: 50 * ms, 1: 50 * ms, 2: 0, 3: 50 * ms}, true)
	together := beats(map[int32]time.Duration{0: 0, 1: 1 * ms, 2: 0, 3: 1 * ms}, true)
	// Rank 2 spins, still beating; the others wait silent, together.
	spinning := beats(map[int32]time.Duration{0: 0, 1: 1 * ms, 3: 0}, true)
	spinning[2] = &musterv1.RankClues{Rank: 2, LastBeatUnixNs: t0 + int64(2*time.Second)}
	withRecorder := beats(map[int32]time.Duration{0: 0, 1: 0, 2: 0, 3: 0}, true)
	for rank, c := range withRecorder {
		c.Recorder = recorder("0", 21, "scheduled")
		if rank == 2 {
			c.Recorder = recorder("0", 20, "completed")
		}
	}
	rasFor := func(rank int32) []*musterv1.RasAnswer {
		return []*musterv1.RasAnswer{{Asked: true, Answered: true, Elsewhere: 1},
			{Asked: true, Answered: true, Culprits: []*musterv1.RasCulprit{{Rank: rank, Communicator: "5974ff3706582d81", Op: "AllReduce", Launched: 20, OthersLaunched: 21}}}}
	}
	tests := []struct {
		name       string
		ranks      map[int32]*musterv1.RankClues
		ras        []*musterv1.RasAnswer
		nodeOf     func(int32) int32
		evidence   musterv1.HangEvidence
		culprits   []int32
		cannotTell []int32
	}{
		{"rank 2 silent 50 ms first", fourSilent, nil, oneNode, musterv1.HangEvidence_HANG_EVIDENCE_HEARTBEATS, []int32{2}, nil},
		{"all silent within 1 ms", together, nil, oneNode, 0, nil, []int32{0, 1, 2, 3}},
		{"a spinning rank is never named", spinning, nil, oneNode, 0, nil, []int32{0, 1, 3}},
		{"the only silent rank", beats(map[int32]time.Duration{1: 0}, true), nil, oneNode, musterv1.HangEvidence_HANG_EVIDENCE_HEARTBEATS, []int32{1}, nil},
		{"50 ms apart across nodes is within their resolution", fourSilent, nil, func(r int32) int32 { return r / 2 }, 0, nil, []int32{0, 1, 2, 3}},
		{"150 ms apart across nodes", beats(map[int32]time.Duration{0: 150 * ms, 1: 150 * ms, 2: 0, 3: 150 * ms}, true), nil,
			func(r int32) int32 { return r / 2 }, musterv1.HangEvidence_HANG_EVIDENCE_HEARTBEATS, []int32{2}, nil},
		{"two ranks first, together", beats(map[int32]time.Duration{0: 0, 1: 5 * ms, 2: 80 * ms, 3: 80 * ms}, true), nil, oneNode,
			0, nil, []int32{0, 1}},
		// At the look that found rank 0 hung, rank 2 was not past its
		// timeout yet: its beat, 3 ms after rank 0's, still counts.
		{"silent within the resolution, not yet past the timeout", map[int32]*musterv1.RankClues{
			0: {Rank: 0, Silent: true, LastBeatUnixNs: t0}, 2: {Rank: 2, LastBeatUnixNs: t0 + int64(3*ms)},
			1: {Rank: 1, LastBeatUnixNs: t0 + int64(9*ms)}, 3: {Rank: 3, LastBeatUnixNs: t0 + int64(30*ms)}}, nil, oneNode,
			0, nil, []int32{0, 1, 2}},
		{"the first, alone, but not past its timeout", beats(map[int32]time.Duration{0: 0, 1: 500 * ms}, false), nil, oneNode, 0, nil, []int32{0}},
		{"the flight recorders over heartbeats", withRecorder, nil, oneNode, musterv1.HangEvidence_HANG_EVIDENCE_FLIGHT_RECORDER, []int32{2}, nil},
		{"RAS over the flight recorders", withRecorder, rasFor(1), oneNode, musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS, []int32{1}, nil},
		// Rank 2 stopped before the all_reduce of its sub-group {0, 2}: rank
		// 0 waits in it, and is behind rank 1 and 3 in the world's.
		{"RAS on a sub-group's hang", together, []*musterv1.RasAnswer{{Asked: true, Answered: true, Culprits: []*musterv1.RasCulprit{
			{Rank: 0, Communicator: "world", Op: "AllReduce", Launched: 21, OthersLaunched: 22},
			{Rank: 2, Communicator: "world", Op: "AllReduce", Launched: 21, OthersLaunched: 22},
			{Rank: 2, Communicator: "even", Op: "AllReduce", Launched: 20, OthersLaunched: 21}}}}, oneNode,
			musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS, []int32{2}, nil},
		{"RAS on two hangs apart", together, []*musterv1.RasAnswer{{Asked: true, Answered: true, Culprits: []*musterv1.RasCulprit{
			{Rank: 1, Communicator: "odd", Op: "AllReduce", Launched: 3, OthersLaunched: 4},
			{Rank: 2, Communicator: "even", Op: "AllReduce", Launched: 3, OthersLaunched: 4}}}}, oneNode,
			musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS, []int32{1, 2}, nil},
		{"a stopped process", map[int32]*musterv1.RankClues{0: {Rank: 0, Silent: true, LastBeatUnixNs: t0}, 1: {Rank: 1, Silent: true, LastBeatUnixNs: t0},
			2: {Rank: 2, Silent: true, Stopped: true, LastBeatUnixNs: t0}}, []*musterv1.RasAnswer{{Asked: true, Error: "deadline exceeded"}}, oneNode,
			musterv1.HangEvidence_HANG_EVIDENCE_PROCESS_STOPPED, []int32{2}, nil},
		{"RAS that named nobody", together, []*musterv1.RasAnswer{{Asked: true, Answered: true}}, oneNode, 0, nil, []int32{0, 1, 2, 3}},
		{"nothing silent", beats(map[int32]time.Duration{0: 0}, false), nil, oneNode, 0, nil, []int32{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := hangcause.Decide(hangcause.Round{NodeOf: tt.nodeOf, Ranks: tt.ranks, RAS: tt.ras})
			if v.GetEvidence() != tt.evidence || !slices.Equal(v.GetCulprits(), tt.culprits) {
				t.Errorf("evidence %s, culprits %v; want %s, %v", v.GetEvidence(), v.GetCulprits(), tt.evidence, tt.culprits)
			}
			if (tt.cannotTell != nil) != v.GetCannotTell() || !slices.Equal(v.GetSilent(), tt.cannotTell) && len(tt.cannotTell) > 0 {
				t.Errorf("cannot tell %v, silent %v; want silent %v", v.GetCannotTell(), v.GetSilent(), tt.cannotTell)
			}
		})
	}
}

// What the verdict says of the collective the others wait in.
func TestDecideNamesTheCollective(t *testing.T) {
	ranks := beats(map[int32]time.Duration{0: 0, 1: 0, 2: 0, 3: 0}, true)
	for rank, c := range ranks {
		// The default group is level; in group 1 of ranks 0 and 2, rank 0
		// never entered its 8th collective.
		c.Recorder = recorder("0", 30, "completed")
		if rank == 0 {
			c.Recorder = append(c.Recorder, &musterv1.Collective{ProcessGroup: "1", ProcessGroupName: "sub", Op: "nccl:broadcast", Seq: 7, State: "completed"})
		}
		if rank == 2 {
			c.Recorder = append(c.Recorder, &musterv1.Collective{ProcessGroup: "1", ProcessGroupName: "sub", Op: "nccl:broadcast", Seq: 8, State: "started"})
		}
	}
	v := hangcause.Decide(hangcause.Round{NodeOf: oneNode, Ranks: ranks})
	c := v.GetCollective()
	if !slices.Equal(v.GetCulprits(), []int32{0}) || c.GetProcessGroup() != "1" || c.GetSeq() != 8 || c.GetOp() != "nccl:broadcast" {
		t.Fatalf("culprits %v in %v; want rank 0, never in group 1's broadcast #8", v.GetCulprits(), c)
	}
}
