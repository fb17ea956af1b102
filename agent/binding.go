package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

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

// workerBinding is where one worker runs: what the shim binds and what
// its start reports.
type workerBinding struct {
	// report is sent with its start; nil when the topology was not read.
	report *musterv1.WorkerBinding
	// cpus and memory are what the shim binds it to (the NUMA nodes its
	// memory prefers); nil: left alone.
	cpus, memory []int
	// ucxDevice names the RDMA NIC nearest its first GPU as UCX does
	// (mlx5_0:1) when it is bound, "" for none.
	ucxDevice string
}

// bindingsOf is where each of a job's workers on this node runs in mode:
// gpus[i] are worker i's GPUs (indices among the node's). With
// topology.BindNone nothing is bound and each report gives the CPUs a
// "numa" binding would.
func bindingsOf(t *topology.Topology, mode topology.Mode, gpus [][]int, busy topology.CPUSet) []workerBinding {
	out := make([]workerBinding, len(gpus))
	if t == nil {
		return out
	}
	vendor := gpuVendor(t)
	bound := topology.Bind(t, vendor, mode, gpus, busy)
	for i, g := range gpus {
		b := &musterv1.WorkerBinding{}
		out[i].report = b
		for _, n := range g {
			b.Gpus = append(b.Gpus, int32(n))
		}
		if why := bindingUnknown(t, vendor, g); why != "" {
			b.Unknown = clipNote(why)
			continue
		}
		tb := bound[i]
		for _, n := range tb.NUMANodes {
			b.NumaNodes = append(b.NumaNodes, int32(n))
		}
		b.Cpus, b.CpusNote = tb.CPUs.String(), clipNote(tb.Note)
		if len(b.Cpus) > maxBindingCPUs {
			b.Cpus, b.CpusNote = "", fmt.Sprintf("a list of %d CPUs, too long to send", len(tb.CPUs))
		}
		if len(g) > 0 {
			gpu := t.GPUs[gpuIndex(t, vendor, g[0])]
			b.Nic, b.NicBy = gpu.NearestNIC, gpu.NearestBy
			// UCX is told the NIC only with a binding: without one, nothing changes.
			if n := slices.IndexFunc(t.NICs, func(n topology.NIC) bool { return n.Name == gpu.NearestNIC }); mode != topology.BindNone && n >= 0 &&
				t.NICs[n].Kind == topology.NICRDMA && t.NICs[n].Port > 0 {
				out[i].ucxDevice = fmt.Sprintf("%s:%d", t.NICs[n].Name, t.NICs[n].Port)
			}
		}
		if mode != topology.BindNone && len(tb.CPUs) > 0 {
			b.Mode, b.Threads = string(mode), int32(tb.Threads)
			out[i].cpus = tb.CPUs
			out[i].memory = memoryNodes(t, tb)
			for _, n := range out[i].memory {
				b.MemoryNodes = append(b.MemoryNodes, int32(n))
			}
		}
		if size := proto.Size(b); size > jobspec.MaxBindingBytes {
			out[i].report = &musterv1.WorkerBinding{Unknown: fmt.Sprintf("a binding of %d bytes, too long to send", size)}
		}
	}
	return out
}

// memoryNodes are the NUMA nodes a bound worker's memory prefers: its GPUs'
// nodes that it runs on. None when it runs on none of them (a cpuset on
// another socket), and its memory stays where it runs.
func memoryNodes(t *topology.Topology, b topology.Binding) []int {
	var out []int
	for _, n := range t.NUMANodes {
		if slices.Contains(b.NUMANodes, n.ID) && len(n.CPUs.Intersect(b.CPUs)) > 0 {
			out = append(out, n.ID)
		}
	}
	return out
}

// applied notes in a started worker's report what the shim bound.
func (wb workerBinding) applied(cpuErr, memErr error) {
	b := wb.report
	if b == nil || wb.cpus == nil {
		return
	}
	b.Applied = cpuErr == nil
	if cpuErr != nil {
		b.CpusNote = clipNote(joinNote(b.CpusNote, "could not bind: "+cpuErr.Error()))
	}
	if memErr != nil {
		b.MemoryNodes = nil
		if errors.Is(memErr, syscall.EEXIST) {
			b.CpusNote = clipNote(joinNote(b.CpusNote, "memory policy kept: the agent runs under its own"))
		} else {
			b.CpusNote = clipNote(joinNote(b.CpusNote, "memory not bound: "+memErr.Error()))
		}
	}
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
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
