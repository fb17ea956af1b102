package cmdline

import "github.com/urfave/cli/v2"

// nearest is the name among flags' visible names closest to the unknown
// flag name, for "did you mean": "" when none is near enough to be a typo.
func nearest(name string, flags []cli.Flag) string {
	// One edit in a short name, two in a longer one: more finds unrelated
	// flags, and a name of two letters or fewer is too short to tell.
	most := 1
	if len(name) >= 6 {
		most = 2
	}
	if len(name) <= 2 {
		return ""
	}
	best, bestDist := "", most+1
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		names := f.Names()
		if a, ok := f.(aliased); ok {
			names = a.GenericFlag.Names()
		}
		for _, n := range names {
			if d := editDistance(name, n); d < bestDist {
				best, bestDist = n, d
			}
		}
	}
	return best
}

// editDistance counts the insertions, deletions, substitutions and swaps of
// two neighbours that turn a into b (optimal string alignment), so that
// --tiemout is one typo away from --timeout.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
