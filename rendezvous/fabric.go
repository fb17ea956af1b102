package rendezvous

import (
	"cmp"
	"slices"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Node ranks in fabric order: nodes that registered a fabric path
// (block=b1,switch=s3) are ranked so that consecutive ranks share its
// deepest level, which keeps a ring's neighbours on one switch.

// compareRanked orders a job's nodes for their node ranks when the job
// lists no hosts: explicit node ranks first, then the nodes with a fabric
// path by path, then by name; nodes without a path last, by name.
func compareRanked(a, b *node) int {
	ra, rb := a.info.GetRank() >= 0, b.info.GetRank() >= 0
	if ra || rb {
		return compareNodes(a, b)
	}
	if c := compareFabric(a.info.GetFabric(), b.info.GetFabric()); c != 0 {
		return c
	}
	return compareNodes(a, b)
}

// compareFabric orders paths level by level, names and values in natural
// order, a path before the longer ones it begins; no path comes last.
func compareFabric(a, b []*musterv1.FabricLevel) int {
	if (len(a) == 0) != (len(b) == 0) {
		if len(a) == 0 {
			return 1
		}
		return -1
	}
	for i := range min(len(a), len(b)) {
		if c := naturalCompare(a[i].GetName(), b[i].GetName()); c != 0 {
			return c
		}
		if c := naturalCompare(a[i].GetValue(), b[i].GetValue()); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// orderListed orders the nodes of a job that lists its hosts: node rank 0
// stays the first listed host, as mpirun's -H makes it. When any node has
// a fabric path, the others follow in fabric order, turned to begin with
// rank 0's own group (those with its whole path): its group's other nodes
// come next, then the groups after it and last those before it, so that
// every group stays together and a ring crosses as few groups as it can.
func orderListed(picked []*node) []*node {
	if len(picked) < 2 || !slices.ContainsFunc(picked, func(n *node) bool { return len(n.info.GetFabric()) > 0 }) {
		return picked
	}
	first := picked[0]
	sorted := slices.Clone(picked)
	slices.SortFunc(sorted, func(a, b *node) int {
		if c := compareFabric(a.info.GetFabric(), b.info.GetFabric()); c != 0 {
			return c
		}
		return naturalCompare(a.info.GetName(), b.info.GetName())
	})
	inGroup := func(n *node) bool { return compareFabric(n.info.GetFabric(), first.info.GetFabric()) == 0 }
	start := slices.IndexFunc(sorted, inGroup)
	end := start
	for end < len(sorted) && inGroup(sorted[end]) {
		end++
	}
	out := append(picked[:0:0], first)
	for _, n := range slices.Concat(sorted[start:end], sorted[end:], sorted[:start]) {
		if n != first {
			out = append(out, n)
		}
	}
	return out
}
