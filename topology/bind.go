package topology

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Mode is how a node's workers are bound to CPUs and memory, each
// anchored on its own GPUs.
type Mode string

// The binding modes.
const (
	// BindNone binds nothing: workers run where the agent may.
	BindNone Mode = "none"
	// BindNUMA binds a worker to its GPUs' NUMA nodes' CPUs.
	BindNUMA Mode = "numa"
	// BindSocket binds a worker to the CPUs of its GPUs' sockets.
	BindSocket Mode = "socket"
	// BindCores gives the workers that share a NUMA node disjoint cores of
	// it, a fair share each, SMT siblings together.
	BindCores Mode = "cores"
)

// Modes are the binding modes' names, in the order help lists them.
var Modes = []Mode{BindNone, BindNUMA, BindSocket, BindCores}

// torchrunModes maps torchrun's --numa-binding names to muster's.
var torchrunModes = map[string]Mode{"node": BindNUMA, "socket": BindSocket, "exclusive": BindCores}

// ParseMode parses a binding mode: muster's names, or torchrun's
// --numa-binding ones (node, socket, exclusive). "" is none.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return BindNone, nil
	}
	if slices.Contains(Modes, Mode(s)) {
		return Mode(s), nil
	}
	if m, ok := torchrunModes[s]; ok {
		return m, nil
	}
	if s == "core-complex" {
		return "", fmt.Errorf("%q (torchrun's L3-cache binding) is not supported: use cores, which gives each worker its own cores of its GPUs' NUMA node", s)
	}
	return "", fmt.Errorf("%q is not a binding: want none, numa, socket or cores (or torchrun's node, socket, exclusive)", clip(s))
}

// Bind gives each of a job's workers on this node its binding in mode:
// gpus[i] are worker i's GPUs (indices among the vendor's). Every binding
// lies within the allowed CPUs and is never empty while they are not. With
// BindNone, each is the "numa" binding, as a hint of where it would go.
// Threads is how many cores the worker has to itself (its share where
// workers share them), 0 with BindNone. busy are the CPUs other jobs'
// workers hold with BindCores: cores binds elsewhere while cores are free.
func Bind(t *Topology, vendor string, mode Mode, gpus [][]int, busy CPUSet) []Binding {
	out := make([]Binding, len(gpus))
	for i, g := range gpus {
		out[i] = NUMABinding(t, vendor, g)
	}
	switch mode {
	case BindSocket:
		for i := range out {
			out[i] = socketBinding(t, out[i])
		}
	case BindCores:
		splitCores(t, out, busy)
		return out
	case BindNUMA:
	default:
		return out
	}
	sharers := map[string]int{}
	for _, b := range out {
		sharers[b.CPUs.String()]++
	}
	for i := range out {
		out[i].Threads = max(1, coresIn(t, out[i].CPUs)/sharers[out[i].CPUs.String()])
	}
	return out
}

// socketBinding widens a numa binding to the sockets holding its CPUs.
func socketBinding(t *Topology, b Binding) Binding {
	if b.Note != "" {
		return b // already all allowed CPUs
	}
	if len(t.Sockets) == 0 {
		b.Note = "sockets unknown: its NUMA nodes' CPUs"
		return b
	}
	var cpus CPUSet
	for _, s := range t.Sockets {
		if len(s.Intersect(b.CPUs)) > 0 {
			cpus = cpus.Union(s)
		}
	}
	b.CPUs = cpus.Intersect(t.Allowed)
	return b
}

// splitCores gives the workers sharing one numa binding disjoint cores of
// it, a fair share each, away from the busy CPUs of other jobs. Narrower
// sets choose first, so that a worker whose GPUs span NUMA nodes takes what
// the others leave. When a set has fewer free cores than workers, they
// share cores, with a note: other jobs' first, then their own.
func splitCores(t *Topology, out []Binding, busy CPUSet) {
	groups := map[string][]int{}
	var keys []string
	for i, b := range out {
		k := b.CPUs.String()
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	slices.SortFunc(keys, func(a, b string) int {
		x, y := out[groups[a][0]].CPUs, out[groups[b][0]].CPUs
		return cmp.Or(cmp.Compare(len(x), len(y)), cmp.Compare(first(x), first(y)))
	})
	taken := map[int]bool{} // cores given, by their first CPU
	for _, k := range keys {
		workers := groups[k]
		all := coresOf(t, out[workers[0]].CPUs)
		var free []CPUSet
		for _, c := range all {
			if !taken[c[0]] {
				free = append(free, c)
			}
		}
		note := ""
		if own := withoutBusy(free, busy); len(own) >= len(workers) {
			free = own
		} else if len(free) >= len(workers) {
			note = "cores shared with another job's workers"
		} else {
			free = all
			if len(free) < len(workers) {
				note = fmt.Sprintf("%d workers share %d core%s", len(workers), len(free), map[bool]string{true: "s"}[len(free) != 1])
			} else {
				note = "cores shared with workers whose GPUs span NUMA nodes"
			}
		}
		for j, w := range workers {
			var mine []CPUSet
			if len(free) >= len(workers) {
				mine = free[j*len(free)/len(workers) : (j+1)*len(free)/len(workers)]
			} else if len(free) > 0 {
				mine = free[j%len(free) : j%len(free)+1]
			}
			var cpus CPUSet
			for _, c := range mine {
				cpus = cpus.Union(c)
				taken[c[0]] = true
			}
			if len(cpus) == 0 {
				continue // no allowed CPUs: the numa binding says why
			}
			out[w].CPUs, out[w].Threads = cpus, len(mine)
			if len(free) < len(workers) {
				out[w].Threads = 1
			}
			out[w].Note = joinNotes(strings.Replace(out[w].Note, "all allowed CPUs", "a share of the allowed CPUs", 1), note)
		}
	}
}

// withoutBusy is the cores that hold none of the busy CPUs.
func withoutBusy(cores []CPUSet, busy CPUSet) []CPUSet {
	var out []CPUSet
	for _, c := range cores {
		if len(c.Intersect(busy)) == 0 {
			out = append(out, c)
		}
	}
	return out
}

// coresOf is the cores (SMT sibling groups) of set, each cut to set; one
// CPU a core when the siblings are unknown.
func coresOf(t *Topology, set CPUSet) []CPUSet {
	var out []CPUSet
	seen := map[int]bool{}
	for _, core := range t.Cores {
		if c := core.Intersect(set); len(c) > 0 {
			out = append(out, c)
			for _, cpu := range c {
				seen[cpu] = true
			}
		}
	}
	for _, cpu := range set {
		if !seen[cpu] {
			out = append(out, CPUSet{cpu})
		}
	}
	slices.SortFunc(out, func(a, b CPUSet) int { return cmp.Compare(a[0], b[0]) })
	return out
}

func coresIn(t *Topology, set CPUSet) int { return len(coresOf(t, set)) }

func first(s CPUSet) int {
	if len(s) == 0 {
		return -1
	}
	return s[0]
}

func joinNotes(a, b string) string {
	return strings.Join(slices.DeleteFunc([]string{a, b}, func(s string) bool { return s == "" }), "; ")
}
