package agent

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/topology"
)

// Bounds on what a binding says, well within jobspec.MaxBindingBytes: a
// CPU list longer than maxBindingCPUs is not sent, a note is cut.
const (
	maxBindingCPUs = 1024
	maxBindingNote = 256
)

// bindingOf is where a worker that uses gpus (indices among the node's
// GPUs) sits: the CPUs a "numa" binding would give it and the NIC nearest
// its first GPU. Nothing is bound yet, so applied stays false. Nil when the
// topology was not read.
func bindingOf(t *topology.Topology, gpus []int) *musterv1.WorkerBinding {
	if t == nil {
		return nil
	}
	b := &musterv1.WorkerBinding{}
	for _, g := range gpus {
		b.Gpus = append(b.Gpus, int32(g))
	}
	vendor := gpuVendor(t)
	if why := bindingUnknown(t, vendor, gpus); why != "" {
		b.Unknown = clipNote(why)
		return b
	}
	nb := topology.NUMABinding(t, vendor, gpus)
	for _, n := range nb.NUMANodes {
		b.NumaNodes = append(b.NumaNodes, int32(n))
	}
	b.Cpus, b.CpusNote = nb.CPUs.String(), clipNote(nb.Note)
	if len(b.Cpus) > maxBindingCPUs {
		b.Cpus, b.CpusNote = "", fmt.Sprintf("a list of %d CPUs, too long to send", len(nb.CPUs))
	}
	if len(gpus) > 0 {
		g := t.GPUs[gpuIndex(t, vendor, gpus[0])]
		b.Nic, b.NicBy = g.NearestNIC, g.NearestBy
	}
	if size := proto.Size(b); size > jobspec.MaxBindingBytes {
		return &musterv1.WorkerBinding{Unknown: fmt.Sprintf("a binding of %d bytes, too long to send", size)}
	}
	return b
}

// bindingUnknown says why the topology gives the worker no binding: its
// CPUs or one of its GPUs are not in it (a container that hides sysfs).
func bindingUnknown(t *topology.Topology, vendor string, gpus []int) string {
	if len(t.Allowed) == 0 {
		return withNote("its CPUs are not in sysfs", t.Notes, "CPU")
	}
	for _, g := range gpus {
		if gpuIndex(t, vendor, g) < 0 {
			return withNote(fmt.Sprintf("GPU %d is not in its sysfs topology", g), t.Notes, "GPU")
		}
	}
	return ""
}

// withNote adds the first of the topology's notes that speaks of about,
// which says why it could not be read.
func withNote(why string, notes []string, about string) string {
	if i := slices.IndexFunc(notes, func(n string) bool { return strings.Contains(n, about) }); i >= 0 {
		return why + ": " + notes[i]
	}
	return why
}

// gpuVendor is the vendor whose GPU indices the agent's GPUs are: NVIDIA
// (NVML's) unless the node has AMD GPUs alone.
func gpuVendor(t *topology.Topology) string {
	if len(t.GPUs) > 0 && !slices.ContainsFunc(t.GPUs, func(g topology.GPU) bool { return g.Vendor == topology.VendorNVIDIA }) {
		return t.GPUs[0].Vendor
	}
	return topology.VendorNVIDIA
}

func gpuIndex(t *topology.Topology, vendor string, idx int) int {
	return slices.IndexFunc(t.GPUs, func(g topology.GPU) bool { return g.Vendor == vendor && g.Index == idx })
}

func clipNote(s string) string {
	if len(s) > maxBindingNote {
		return strings.ToValidUTF8(s[:maxBindingNote], "") + "..."
	}
	return s
}
