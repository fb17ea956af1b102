package supervise

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A worker's binding is set on the shim's locked thread just before the
// fork and undone just after: a child starts with its parent thread's CPU
// affinity and memory policy, and keeps both across exec.

// maxBindCPUs and maxBindNodes bound the masks: the kernel's largest
// NR_CPUS and MAX_NUMNODES.
const (
	maxBindCPUs  = 8192
	maxBindNodes = 1024
)

// Memory policy modes (linux/mempolicy.h).
const (
	mpolDefault       = 0
	mpolPreferred     = 1
	mpolPreferredMany = 5
)

// threadBinding is the shim thread's own affinity and whether its memory
// policy is the default, read once, to go back to after each bound fork.
type threadBinding struct {
	affinity  []uint64
	ownPolicy bool // the shim was started with a memory policy (numactl): memory is left alone
	read      bool
}

// bind makes the next fork start on cpus with its memory preferred on
// nodes (either may be empty: left alone). It says what could not be done:
// cpuErr for the CPUs, memErr for the memory (EEXIST: the agent runs under
// a memory policy of its own, which is kept). undo goes back.
func (b *threadBinding) bind(cpus, nodes []int) (undo func(), cpuErr, memErr syscall.Errno) {
	if len(cpus) == 0 && len(nodes) == 0 {
		return func() {}, 0, 0
	}
	if !b.read {
		b.read = true
		b.affinity = make([]uint64, maxBindCPUs/64)
		if n, err := schedAffinity(unix.SYS_SCHED_GETAFFINITY, b.affinity); err == 0 {
			b.affinity = b.affinity[:n/8]
		} else {
			b.affinity = nil
		}
		var mode int32
		if _, _, err := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&mode)), 0, 0, 0, 0, 0); err == 0 {
			b.ownPolicy = mode != mpolDefault
		}
	}
	boundCPUs, boundMem := false, false
	if len(cpus) > 0 {
		if b.affinity == nil {
			cpuErr = syscall.ENOSYS
		} else if mask, ok := maskOf(cpus, maxBindCPUs); !ok {
			cpuErr = syscall.EINVAL
		} else if _, cpuErr = schedAffinity(unix.SYS_SCHED_SETAFFINITY, mask); cpuErr == 0 {
			boundCPUs = true
		}
	}
	if len(nodes) > 0 {
		if b.ownPolicy {
			memErr = syscall.EEXIST
		} else if memErr = setMempolicy(nodes); memErr == 0 {
			boundMem = true
		}
	}
	return func() {
		if boundCPUs {
			schedAffinity(unix.SYS_SCHED_SETAFFINITY, b.affinity)
		}
		if boundMem {
			unix.Syscall(unix.SYS_SET_MEMPOLICY, mpolDefault, 0, 0)
		}
	}, cpuErr, memErr
}

// schedAffinity gets or sets the calling thread's affinity mask (pid 0 is
// the thread); it returns the bytes the kernel used.
func schedAffinity(call uintptr, mask []uint64) (int, syscall.Errno) {
	n, _, err := unix.RawSyscall(call, 0, uintptr(len(mask)*8), uintptr(unsafe.Pointer(&mask[0])))
	return int(n), err
}

// setMempolicy prefers the NUMA nodes for the calling thread's memory: one
// node, or several where the kernel has MPOL_PREFERRED_MANY (5.15).
func setMempolicy(nodes []int) syscall.Errno {
	mask, ok := maskOf(nodes, maxBindNodes)
	if !ok {
		return syscall.EINVAL
	}
	mode := uintptr(mpolPreferred)
	if len(nodes) > 1 {
		mode = mpolPreferredMany
	}
	// The kernel reads maxnode-1 bits.
	_, _, err := unix.Syscall(unix.SYS_SET_MEMPOLICY, mode, uintptr(unsafe.Pointer(&mask[0])), uintptr(len(mask)*64+1))
	return err
}

// maskOf is a bit mask of the numbers, each below limit.
func maskOf(ns []int, limit int) ([]uint64, bool) {
	top := 0
	for _, n := range ns {
		if n < 0 || n >= limit {
			return nil, false
		}
		top = max(top, n)
	}
	mask := make([]uint64, top/64+1)
	for _, n := range ns {
		mask[n/64] |= 1 << (n % 64)
	}
	return mask, true
}
