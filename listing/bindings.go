package listing

import (
	"fmt"
	"strconv"
	"strings"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// BindingLine is what --report-bindings prints for a started worker, after
// "muster: ", and `launcher jobs JOB` for each worker: its node, rank, GPUs,
// their NUMA nodes, its CPUs and memory, bound or not, and the NIC nearest
// its GPUs.
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
		w.WriteString(", " + numaNodes(b.GetNumaNodes(), "no NUMA node"))
	}
	cpus := b.GetCpus()
	var notes []string
	if b.GetApplied() {
		notes = append(notes, fmt.Sprintf("bound: %s, %d core(s)", b.GetMode(), b.GetThreads()))
	}
	switch {
	case b.GetCpusNote() != "" && (len(b.GetGpus()) > 0 || cpus == "" || b.GetApplied()):
		notes = append(notes, b.GetCpusNote())
	case len(b.GetGpus()) == 0 && !b.GetApplied():
		// Its note would only say there are no GPUs again.
		notes = append(notes, "all allowed")
	}
	if !b.GetApplied() {
		notes = append(notes, "not bound: --cpu-bind "+orNone(b.GetMode()))
	}
	if cpus == "" {
		cpus = "not sent"
	}
	w.WriteString(", CPUs " + cpus)
	if len(notes) > 0 {
		w.WriteString(" (" + strings.Join(notes, "; ") + ")")
	}
	if m := b.GetMemoryNodes(); len(m) > 0 {
		w.WriteString(", memory on " + numaNodes(m, ""))
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

// numaNodes names NUMA nodes: "NUMA node 0", "NUMA nodes 0,1", none for
// none.
func numaNodes(n []int32, none string) string {
	switch len(n) {
	case 0:
		return none
	case 1:
		return "NUMA node " + joinInt32s(n)
	}
	return "NUMA nodes " + joinInt32s(n)
}

func orNone(mode string) string {
	if mode == "" {
		return "none"
	}
	return mode
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
