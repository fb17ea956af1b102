package progress

import (
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestDescribeWaiting(t *testing.T) {
	tests := []struct {
		name string
		w    *musterv1.WaitingForNodes
		want string
	}{
		{"none yet", &musterv1.WaitingForNodes{Wanted: 2}, "0 of 2 ready; 2 missing"},
		{"named", &musterv1.WaitingForNodes{Wanted: 3, Ready: 2, ReadyNodes: []string{"a", "b"}}, "2 of 3 ready (a, b); 1 missing"},
		{"more than named", &musterv1.WaitingForNodes{Wanted: 9, Ready: 5, ReadyNodes: []string{"a", "b"}},
			"5 of 9 ready (a, b, and 3 more); 4 missing"},
		{"elastic", &musterv1.WaitingForNodes{Wanted: 4, Ready: 1, ReadyNodes: []string{"a"}, Least: 2},
			"1 of 4 ready (a); 3 missing (at least 2 needed)"},
		{"unusable", &musterv1.WaitingForNodes{Wanted: 1, Unusable: []string{"node g has 0 GPUs", "listed host c is not registered"}},
			"0 of 1 ready; 1 missing; not usable: node g has 0 GPUs; listed host c is not registered"},
		{"all ready", &musterv1.WaitingForNodes{Wanted: 1, Ready: 1, ReadyNodes: []string{"a"}}, "1 of 1 ready (a)"},
		{"all ready, held", &musterv1.WaitingForNodes{Wanted: 2, Ready: 2, ReadyNodes: []string{"a", "c"},
			Held: "node b's workers to be certainly gone: agent connection closed", HeldUntilUnixMs: 1_700_000_011_000},
			"2 of 2 ready (a, c); held until 22:13:31Z for node b's workers to be certainly gone: agent connection closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DescribeWaiting(tt.w); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
