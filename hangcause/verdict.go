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
// else ranks whose processes were stopped, else the flight recorders where
// a process group has ranks behind, else heartbeats by their own times,
// else that it cannot tell.
func Decide(r Round) *musterv1.HangVerdict {
	if v := byRAS(r.RAS); v != nil {
		return v
	}
	if v := byStopped(r.Ranks); v != nil {
		return v
	}
	if v := byFlightRecorder(r.Ranks); v != nil {
		return v
	}
	return byHeartbeats(r)
}

// byRAS names the ranks NCCL's RAS named behind or missing, on any node.
// A rank that waits in one communicator for the culprit is behind in the
// others it shares with ranks that went on (a sub-group's hang leaves half
// the world's communicator behind): where communicators name different
// ranks, those named in every one of them are the culprits, and only
// where none is, all of them.
func byRAS(answers []*musterv1.RasAnswer) *musterv1.HangVerdict {
	byComm := map[string][]*musterv1.RasCulprit{}
	var comms []string
	for _, a := range answers {
		for _, c := range a.GetCulprits() {
			id := c.GetCommunicator()
			if byComm[id] == nil {
				comms = append(comms, id)
			}
			byComm[id] = append(byComm[id], c)
		}
	}
	if len(comms) == 0 {
		return nil
	}
	ranksOf := func(cs []*musterv1.RasCulprit) []int32 {
		var out []int32
		for _, c := range cs {
			if !slices.Contains(out, c.GetRank()) {
				out = append(out, c.GetRank())
			}
		}
		slices.Sort(out)
		return out
	}
	// The communicator that names the fewest ranks says what they missed.
	slices.SortFunc(comms, func(a, b string) int {
		if d := cmp.Compare(len(ranksOf(byComm[a])), len(ranksOf(byComm[b]))); d != 0 {
			return d
		}
		return cmp.Compare(a, b)
	})
	culprits := ranksOf(byComm[comms[0]])
	var all []*musterv1.RasCulprit
	for _, id := range comms {
		named := ranksOf(byComm[id])
		culprits = slices.DeleteFunc(culprits, func(r int32) bool { return !slices.Contains(named, r) })
		all = append(all, byComm[id]...)
	}
	if len(culprits) == 0 {
		culprits = ranksOf(all)
	}
	first := byComm[comms[0]][0]
	return &musterv1.HangVerdict{Evidence: musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS, Culprits: culprits,
		Collective: &musterv1.Collective{Communicator: first.GetCommunicator(), Op: first.GetOp(), Seq: first.GetOthersLaunched()},
		Launched:   first.GetLaunched(), Missing: first.GetMissing()}
}

// byStopped names the ranks whose processes were stopped.
func byStopped(ranks map[int32]*musterv1.RankClues) *musterv1.HangVerdict {
	var culprits []int32
	for rank, c := range ranks {
		if c.GetStopped() {
			culprits = append(culprits, rank)
		}
	}
	if len(culprits) == 0 {
		return nil
	}
	slices.Sort(culprits)
	return &musterv1.HangVerdict{Evidence: musterv1.HangEvidence_HANG_EVIDENCE_PROCESS_STOPPED, Culprits: culprits}
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
