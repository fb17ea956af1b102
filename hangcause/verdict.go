// Package hangcause says who hung in a round of a job, from the clues its
// nodes' agents gathered: NCCL's RAS service, PyTorch's flight recorders and
// heartbeats, strongest first. Ranks waiting in a collective go silent
// within milliseconds of the rank that never entered it, so heartbeats
// alone name a culprit only when it fell silent first by more than their
// resolution; otherwise the verdict says it cannot tell.
package hangcause

import (
	"cmp"
	"slices"
	"time"

	"github.com/musterhq/muster/flightrec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Resolutions of heartbeat times. A heartbeat file's mtime comes from the
// kernel's coarse clock (a tick: 1 to 10 ms); two nodes' clocks also differ
// by their synchronisation's error, for which 100 ms is a generous bound
// on a LAN under NTP or PTP.
const (
	SameNodeResolution  = 20 * time.Millisecond
	CrossNodeResolution = 100 * time.Millisecond
)

// maxListed bounds the ranks a verdict lists by name.
const maxListed = 64

// Round is what the store knows of a round's hang: each rank's node, and the
// clues of each node that gave them.
type Round struct {
	// NodeOf is a rank's node rank.
	NodeOf func(rank int32) int32
	// Ranks are the clues of every rank reported, by rank.
	Ranks map[int32]*musterv1.RankClues
	// RAS are the nodes' RAS answers.
	RAS []*musterv1.RasAnswer
}

// Decide is the verdict on a round's hang: NCCL's RAS where it named ranks,
// else the flight recorders where a process group has ranks behind, else
// heartbeats by their own times, else that it cannot tell.
func Decide(r Round) *musterv1.HangVerdict {
	if v := byRAS(r.RAS); v != nil {
		return v
	}
	if v := byFlightRecorder(r.Ranks); v != nil {
		return v
	}
	return byHeartbeats(r)
}

// byRAS names the ranks NCCL's RAS named behind or missing, on any node.
func byRAS(answers []*musterv1.RasAnswer) *musterv1.HangVerdict {
	var v *musterv1.HangVerdict
	for _, a := range answers {
		for _, c := range a.GetCulprits() {
			if v == nil {
				v = &musterv1.HangVerdict{Evidence: musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS,
					Collective: &musterv1.Collective{Communicator: c.GetCommunicator(), Op: c.GetOp(), Seq: c.GetOthersLaunched()},
					Launched:   c.GetLaunched(), Missing: c.GetMissing()}
			}
			if !slices.Contains(v.Culprits, c.GetRank()) {
				v.Culprits = append(v.Culprits, c.GetRank())
			}
		}
	}
	if v != nil {
		slices.Sort(v.Culprits)
	}
	return v
}

// byFlightRecorder names the ranks behind in a process group whose other
// ranks wait in a collective.
func byFlightRecorder(ranks map[int32]*musterv1.RankClues) *musterv1.HangVerdict {
	lasts := map[int32]map[string]flightrec.Entry{}
	for rank, c := range ranks {
		for _, col := range c.GetRecorder() {
			if lasts[rank] == nil {
				lasts[rank] = map[string]flightrec.Entry{}
			}
			lasts[rank][col.GetProcessGroup()] = flightrec.Entry{Seq: col.GetSeq(), PGID: col.GetProcessGroup(),
				PGName: col.GetProcessGroupName(), Op: col.GetOp(), State: col.GetState()}
		}
	}
	stragglers := flightrec.Stragglers(lasts)
	if len(stragglers) == 0 {
		return nil
	}
	first := stragglers[0]
	v := &musterv1.HangVerdict{Evidence: musterv1.HangEvidence_HANG_EVIDENCE_FLIGHT_RECORDER,
		Collective: &musterv1.Collective{ProcessGroup: first.PG, ProcessGroupName: first.PGName, Op: first.WaitedOp, Seq: first.WaitedSeq}}
	for _, s := range stragglers {
		if !slices.Contains(v.Culprits, s.Rank) {
			v.Culprits = append(v.Culprits, s.Rank)
		}
	}
	slices.Sort(v.Culprits)
	return v
}

// beat is a rank's last heartbeat.
type beat struct {
	rank   int32
	at     int64 // Unix ns
	silent bool
}

// byHeartbeats names the rank whose last heartbeat came before every other
// running rank's by more than their resolution, if it is past its timeout.
// Where several ranks gave their last heartbeats within the resolution of
// the first, it cannot tell which of them hung first, and lists them: a
// rank waiting in a collective falls silent within milliseconds of the
// one it waits for. A rank that spins while beating is never named, and
// the ranks that wait for it are named together, which tells nothing.
func byHeartbeats(r Round) *musterv1.HangVerdict {
	var all []beat
	for rank, c := range r.Ranks {
		all = append(all, beat{rank, c.GetLastBeatUnixNs(), c.GetSilent()})
	}
	v := &musterv1.HangVerdict{CannotTell: true, ResolutionMs: SameNodeResolution.Milliseconds()}
	if len(all) == 0 {
		return v
	}
	slices.SortFunc(all, func(a, b beat) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return cmp.Compare(a.rank, b.rank)
	})
	first, res := all[0], SameNodeResolution
	for _, b := range all[1:] {
		if time.Duration(b.at-first.at) <= CrossNodeResolution && r.NodeOf(b.rank) != r.NodeOf(first.rank) {
			res = CrossNodeResolution
		}
	}
	v.ResolutionMs = res.Milliseconds()
	var together []int32
	for _, b := range all {
		if time.Duration(b.at-first.at) <= res {
			together = append(together, b.rank)
		}
	}
	if len(together) == 1 && first.silent {
		v.CannotTell, v.Evidence, v.Culprits = false, musterv1.HangEvidence_HANG_EVIDENCE_HEARTBEATS, []int32{first.rank}
		if len(all) > 1 {
			v.LeadMs = time.Duration(all[1].at - first.at).Milliseconds()
		}
		return v
	}
	slices.Sort(together)
	v.Silent = together[:min(len(together), maxListed)]
	v.SilentCount = int32(len(together))
	return v
}
