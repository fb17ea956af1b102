package topology

import (
	"slices"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"0-3,8-11\n", "0-3,8-11", false},
		{"", "", false},
		{"\n", "", false},
		{"5", "5", false},
		{"0,2,4,6", "0,2,4,6", false},
		{"0-55,112-167", "0-55,112-167", false},
		{"3,1-2,2", "1-3", false},
		{"8191", "8191", false},
		{"8192", "", true},
		{"3-1", "", true},
		{"1-", "", true},
		{"-1", "", true},
		{"1,,2", "", true},
		{"a", "", true},
		{"+1", "", true},
		{"0-3:2/4", "", true},
		{"00001", "", true},
	}
	for _, tt := range tests {
		got, err := ParseCPUList(tt.in)
		if (err != nil) != tt.wantErr || got.String() != tt.want {
			t.Errorf("ParseCPUList(%q) = %q, %v", tt.in, got, err)
		}
	}
	if _, err := ParseCPUList(strings.Repeat("0,", MaxCPUs) + "0"); err == nil {
		t.Error("more items than CPUs parsed")
	}
}

func TestCPUSetOps(t *testing.T) {
	a, _ := ParseCPUList("0-7")
	b, _ := ParseCPUList("4-11")
	if got := a.Intersect(b).String(); got != "4-7" {
		t.Errorf("intersect %s", got)
	}
	if got := a.Union(b).String(); got != "0-11" {
		t.Errorf("union %s", got)
	}
	if got := a.Intersect(CPUSet{}); got == nil || len(got) != 0 {
		t.Errorf("intersect with none: %#v", got)
	}
}

func TestParseDistances(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"10 21\n", []int{10, 21}, false},
		{"10", []int{10}, false},
		{"", []int{}, false},
		{"10 256", nil, true},
		{"10 -1", nil, true},
		{"10 x", nil, true},
		{"010", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseDistances(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("ParseDistances(%q) = %v, %v", tt.in, got, err)
		}
	}
	if _, err := ParseDistances(strings.Repeat("10 ", maxNUMANodes+1)); err == nil {
		t.Error("more distances than NUMA nodes parsed")
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8-11\n", "", "0-55,112-167", "8191", "3-1", "1,,2", "0-8191,0-8191"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseCPUList(s)
		if err != nil {
			return
		}
		// What parses is a sorted set of CPUs below MaxCPUs that writes
		// back to a list giving the same set.
		if !slices.IsSorted(set) || len(slices.Compact(slices.Clone(set))) != len(set) {
			t.Fatalf("ParseCPUList(%q) = %v: not a set", s, set)
		}
		if len(set) > 0 && (set[0] < 0 || set[len(set)-1] >= MaxCPUs) {
			t.Fatalf("ParseCPUList(%q) = %v: out of range", s, set)
		}
		again, err := ParseCPUList(set.String())
		if err != nil || !slices.Equal(again, set) {
			t.Fatalf("ParseCPUList(%q) = %v, written %q, read back %v, %v", s, set, set.String(), again, err)
		}
	})
}

func FuzzParseDistances(f *testing.F) {
	for _, s := range []string{"10 21\n", "10", "", "10 256", "010"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDistances(s)
		if err != nil {
			return
		}
		if len(d) > maxNUMANodes {
			t.Fatalf("ParseDistances(%q): %d distances", s, len(d))
		}
		for _, n := range d {
			if n < 0 || n > 255 {
				t.Fatalf("ParseDistances(%q) = %v", s, d)
			}
		}
	})
}

func FuzzParsePCIAddr(f *testing.F) {
	for _, s := range []string{"0000:1b:00.0", "10000:00:01.7", "pci0000:00", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if _, ok := parsePCIAddr(s); ok && (len(s) < 12 || len(s) > 16) {
			t.Fatalf("parsePCIAddr(%q) accepted", s)
		}
	})
}
