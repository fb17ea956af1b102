package flightrec

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strconv"
)

// Straggler is a rank behind the others in a process group: it never
// entered the collective they are in.
type Straggler struct {
	PG     string // the group's key, as Dump.Last gives it
	PGName string
	Rank   int32
	// LastSeq and LastState are its last collective in the group; 0 and ""
	// when it recorded none there (see Stragglers).
	LastSeq   int64
	LastState string
	WaitedSeq int64   // the collective the others are in
	WaitedOp  string  // its profiling name
	Waiting   []int32 // the ranks in it that have not completed it, sorted
}

// Stragglers compares, per process group, the ranks' last collectives
// (lasts: rank -> group -> Dump.Last's entry, so that summaries from other
// nodes do, not only whole dumps). Where the highest seq in a group is not
// completed on the ranks that reached it, they wait in it, and every rank
// whose last seq is lower is a straggler. The result is sorted by rank,
// then group.
//
// No verdict comes from a group with fewer than two ranks to compare: one
// rank's dump alone says nothing. Ranks level at one seq, or a highest seq
// that completed everywhere it was reached, mean no rank is behind there.
// A rank in lasts with no entry for a group is judged only when the
// entries list the group's members (Entry.Ranks): then it is a straggler
// with LastSeq 0, as when TORCH_INCLUDE_ONLY_ACTIVE left its completed
// collectives out of its dump. Without members it could as well not
// belong to the group, and it is left out. Entries of the same group id
// with different members (split_group) are different groups.
func Stragglers(lasts map[int32]map[string]Entry) []Straggler {
	type part struct {
		key     string
		members []int32 // nil when not known
		got     map[int32]Entry
	}
	parts := map[string]*part{}
	hasKey := map[string]map[int32]bool{}
	for rank, m := range lasts {
		for key, e := range m {
			id := key + "\x00" + rankSet(e.Ranks)
			p := parts[id]
			if p == nil {
				p = &part{key: key, got: map[int32]Entry{}}
				if e.Ranks != nil {
					p.members = e.Ranks
				}
				parts[id] = p
			}
			p.got[rank] = e
			if hasKey[key] == nil {
				hasKey[key] = map[int32]bool{}
			}
			hasKey[key][rank] = true
		}
	}

	var out []Straggler
	for _, p := range parts {
		var missing []int32
		for _, r := range p.members {
			if _, dumped := lasts[r]; dumped && !hasKey[p.key][r] && !slices.Contains(missing, r) {
				missing = append(missing, r)
			}
		}
		if len(p.got)+len(missing) < 2 {
			continue
		}
		top := int64(0)
		first := true
		for _, e := range p.got {
			if first || e.Seq > top {
				top, first = e.Seq, false
			}
		}
		var waiting []int32
		for r, e := range p.got {
			if e.Seq == top && e.State != StateCompleted {
				waiting = append(waiting, r)
			}
		}
		if len(waiting) == 0 {
			continue
		}
		slices.Sort(waiting)
		w := p.got[waiting[0]]
		add := func(r int32, seq int64, state string) {
			out = append(out, Straggler{PG: p.key, PGName: w.PGName, Rank: r,
				LastSeq: seq, LastState: state, WaitedSeq: top, WaitedOp: w.Op,
				Waiting: slices.Clone(waiting)})
		}
		for r, e := range p.got {
			if e.Seq < top {
				add(r, e.Seq, e.State)
			}
		}
		for _, r := range missing {
			add(r, 0, "")
		}
	}
	slices.SortFunc(out, func(a, b Straggler) int {
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.PG, b.PG), cmp.Compare(a.WaitedSeq, b.WaitedSeq))
	})
	return out
}

// rankSet names a set of ranks whatever their order, "?" when unknown. It
// hashes them: every rank of a large world lists the default group's
// members, and a string of them all per rank would be megabytes.
func rankSet(r []int32) string {
	if r == nil {
		return "?"
	}
	if !slices.IsSorted(r) {
		r = slices.Clone(r)
		slices.Sort(r)
	}
	h := fnv.New64a()
	var b [4]byte
	for _, x := range r {
		binary.LittleEndian.PutUint32(b[:], uint32(x))
		h.Write(b[:])
	}
	return strconv.Itoa(len(r)) + ":" + strconv.FormatUint(h.Sum64(), 16)
}
