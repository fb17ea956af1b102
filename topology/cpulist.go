package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPUs bounds a CPU number: the kernel's largest NR_CPUS is 8192.
const MaxCPUs = 8192

// maxNUMANodes bounds a NUMA node number: the kernel's largest MAX_NUMNODES.
const maxNUMANodes = 1024

// CPUSet is a set of CPU numbers, sorted and without repeats.
type CPUSet []int

// ParseCPUList parses the kernel's list format ("0-3,8-11", "" for none), as
// in cpulist, local_cpulist, thread_siblings_list and Cpus_allowed_list.
// Numbers must be below MaxCPUs and ranges ascending.
func ParseCPUList(s string) (CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return CPUSet{}, nil
	}
	var in [MaxCPUs]bool
	items := 0
	for item := range strings.SplitSeq(s, ",") {
		// The kernel writes at most one item per CPU.
		if items++; items > MaxCPUs {
			return nil, fmt.Errorf("cpu list: more than %d items", MaxCPUs)
		}
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := cpuNumber(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", clip(s), err)
		}
		b := a
		if isRange {
			if b, err = cpuNumber(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", clip(s), err)
			}
			if b < a {
				return nil, fmt.Errorf("cpu list %q: range %s is descending", clip(s), item)
			}
		}
		for c := a; c <= b; c++ {
			in[c] = true
		}
	}
	set := CPUSet{}
	for c, ok := range in {
		if ok {
			set = append(set, c)
		}
	}
	return set, nil
}

// clip shortens what an error message quotes.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// cpuNumber parses one CPU number: decimal digits, below MaxCPUs.
func cpuNumber(s string) (int, error) {
	if s == "" || len(s) > 4 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad cpu number %q", s)
	}
	n, _ := strconv.Atoi(s)
	if n >= MaxCPUs {
		return 0, fmt.Errorf("cpu %d is not below %d", n, MaxCPUs)
	}
	return n, nil
}

func compact(s CPUSet) CPUSet {
	slices.Sort(s)
	return slices.Compact(s)
}

// String writes the set in the kernel's list format, "" for none.
func (s CPUSet) String() string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Intersect is the CPUs in both sets.
func (s CPUSet) Intersect(o CPUSet) CPUSet {
	out := CPUSet{}
	for _, c := range s {
		if _, ok := slices.BinarySearch(o, c); ok {
			out = append(out, c)
		}
	}
	return out
}

// Union is the CPUs in either set.
func (s CPUSet) Union(o CPUSet) CPUSet {
	return compact(append(slices.Clone(s), o...))
}

// ParseDistances parses a NUMA node's distance file ("10 21"): one
// distance per node, each as the ACPI SLIT gives it, 0 to 255.
func ParseDistances(s string) ([]int, error) {
	fields := strings.Fields(s)
	if len(fields) > maxNUMANodes {
		return nil, fmt.Errorf("distances: %d of them, more than %d", len(fields), maxNUMANodes)
	}
	out := make([]int, 0, len(fields))
	for _, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != f {
			return nil, fmt.Errorf("distances %q: bad distance %q", s, f)
		}
		out = append(out, n)
	}
	return out, nil
}
