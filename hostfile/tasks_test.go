package hostfile

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTasksPerNode(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		// Forms from Slurm's sbatch documentation of SLURM_TASKS_PER_NODE.
		{"2(x3),1", []int{2, 2, 2, 1}},
		{"4", []int{4}},
		{"72(x2),36", []int{72, 72, 36}},
		{"1,2,3", []int{1, 2, 3}},
		{"8(x1)", []int{8}},
	}
	for _, tt := range tests {
		got, err := ParseTasksPerNode(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseTasksPerNode(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if back := FormatTasksPerNode(got); back != strings.ReplaceAll(tt.in, "(x1)", "") {
			t.Errorf("FormatTasksPerNode(%v) = %q, want %q", got, back, tt.in)
		}
	}
}

func TestParseTasksPerNodeErrors(t *testing.T) {
	tests := []struct{ in, msg string }{
		{"", "empty task counts"},
		{"2,", `task count must be a positive integer, got ""`},
		{"0", `task count must be a positive integer, got "0"`},
		{"x", `task count must be a positive integer, got "x"`},
		{"2(x3", `want N(xK), got "2(x3"`},
		{"2(3)", `task count must be a positive integer, got "2(3)"`},
		{"2(x0)", "repeat must be positive"},
		{"2(x-1)", `want N(xK), got "2(x-1)"`},
		{"1(x1048576),1", "more than 1048576 nodes"},
		{"1(x99999999)", `want N(xK), got "1(x99999999)"`},
	}
	for _, tt := range tests {
		_, err := ParseTasksPerNode(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseTasksPerNode(%q) error = %v, want %q", tt.in, err, tt.msg)
		}
	}
}

// FuzzParseTasksPerNode: no panic, bounded output, and formatting then
// parsing again gives the same counts.
func FuzzParseTasksPerNode(f *testing.F) {
	for _, s := range []string{"2(x3),1", "4", "1,2,3", "2(x3", "0", "1(x1048576)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		counts, err := ParseTasksPerNode(in)
		if err != nil {
			return
		}
		if len(counts) == 0 || len(counts) > MaxHosts {
			t.Fatalf("ParseTasksPerNode(%q) gave %d counts", in, len(counts))
		}
		for _, c := range counts {
			if c <= 0 || c > MaxSlots {
				t.Fatalf("ParseTasksPerNode(%q) gave count %d", in, c)
			}
		}
		s := FormatTasksPerNode(counts)
		again, err := ParseTasksPerNode(s)
		if err != nil || !reflect.DeepEqual(again, counts) {
			t.Fatalf("%q -> %v -> %q -> %v, %v", in, counts, s, again, err)
		}
	})
}
