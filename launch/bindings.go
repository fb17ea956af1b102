package launch

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// noBindingYet says why no CPUs are bound: nothing binds them yet.
const noBindingYet = "not applied: no --cpu-bind yet"

// BindingLine is what --report-bindings prints for a started worker, after
// "muster: ": its node, rank, GPUs, their NUMA nodes, the CPUs a numa
// binding gives it and the NIC nearest its GPUs.
func BindingLine(s *musterv1.WorkerStarted) string {
	b := s.GetBinding()
	var w strings.Builder
	fmt.Fprintf(&w, "rank %d (node %s, local rank %d): ", s.GetRank(), s.GetNode(), s.GetLocalRank())
	if len(b.GetGpus()) == 0 {
		w.WriteString("no GPUs")
	} else {
		w.WriteString("GPUs " + joinInt32s(b.GetGpus()))
	}
	if b == nil || b.GetUnknown() != "" {
		w.WriteString(", binding unknown")
		return w.String()
	}
	if len(b.GetGpus()) > 0 {
		switch n := b.GetNumaNodes(); len(n) {
		case 0:
			w.WriteString(", no NUMA node")
		case 1:
			w.WriteString(", NUMA node " + joinInt32s(n))
		default:
			w.WriteString(", NUMA nodes " + joinInt32s(n))
		}
	}
	cpus := b.GetCpus()
	var notes []string
	switch {
	case b.GetCpusNote() != "" && (len(b.GetGpus()) > 0 || cpus == ""):
		notes = append(notes, b.GetCpusNote())
	case len(b.GetGpus()) == 0:
		// Its note would only say there are no GPUs again.
		notes = append(notes, "all allowed")
	}
	if !b.GetApplied() {
		notes = append(notes, noBindingYet)
	}
	if cpus == "" {
		cpus = "not sent"
	}
	w.WriteString(", CPUs " + cpus)
	if len(notes) > 0 {
		w.WriteString(" (" + strings.Join(notes, "; ") + ")")
	}
	if len(b.GetGpus()) == 0 {
		return w.String()
	}
	switch b.GetNicBy() {
	case "switch":
		fmt.Fprintf(&w, ", NIC %s (same PCI switch)", b.GetNic())
	case "numa":
		fmt.Fprintf(&w, ", NIC %s (same NUMA node)", b.GetNic())
	default:
		w.WriteString(", no NIC near")
	}
	return w.String()
}

// BindingUnknown says why a started worker's node gives no binding, after
// "muster: "; "" when it gives one. It is said once a node.
func BindingUnknown(s *musterv1.WorkerStarted) string {
	b := s.GetBinding()
	switch {
	case b == nil:
		return fmt.Sprintf("binding unknown on node %s: its agent computes none (an older version)", s.GetNode())
	case b.GetUnknown() != "":
		return fmt.Sprintf("binding unknown on node %s: %s", s.GetNode(), b.GetUnknown())
	}
	return ""
}

func joinInt32s(ns []int32) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(int(n))
	}
	return strings.Join(s, ",")
}

// reportBinding prints a started worker's binding, and first, once for
// its node, why the node gives none.
func (f *follower) reportBinding(ctx context.Context, s *musterv1.WorkerStarted) {
	f.flush(ctx)
	if why := BindingUnknown(s); why != "" && !f.unknownTold[s.GetNode()] {
		if f.unknownTold == nil {
			f.unknownTold = map[string]bool{}
		}
		if len(f.unknownTold) < jobspec.MaxNodes {
			f.unknownTold[s.GetNode()] = true
		}
		fmt.Fprintln(f.opts.Stderr, "muster: "+why)
	}
	fmt.Fprintln(f.opts.Stderr, "muster: "+BindingLine(s))
}
