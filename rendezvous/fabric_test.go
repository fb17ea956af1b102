package rendezvous_test

import (
	"testing"

	"go.uber.org/zap/zaptest"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
)

// A job over a 64-node cluster of 4 switches: in fabric order its ring of
// node ranks crosses a switch 4 times, once per switch; in name order many
// more.
func TestFabricOrderRingCrossings(t *testing.T) {
	tests := []struct {
		name  string
		paths bool
		check func(crossings int) bool
		want  string
	}{
		{"with paths", true, func(c int) bool { return c == 4 }, "4"},
		{"by name", false, func(c int) bool { return c > 4 }, "more than 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rendezvous.NewStore(rendezvous.StoreConfig{Logger: zaptest.NewLogger(t)})
			t.Cleanup(s.Close)
			nodes, switchOf := rendezvoustest.FabricCluster(64, 4, tt.paths)
			for _, n := range nodes {
				if _, err := s.Register(n, "", nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			id, err := s.Submit(&musterv1.JobSpec{Argv: [][]byte{[]byte("x")}, Nnodes: 64, Nproc: 1}, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			ranked := s.Job(id).GetNodes()
			if len(ranked) != 64 {
				t.Fatalf("job on %d nodes, want 64", len(ranked))
			}
			if c := rendezvoustest.RingCrossings(ranked, switchOf); !tt.check(c) {
				t.Errorf("ring crosses a switch %d times, want %s; node ranks %v", c, tt.want, ranked)
			}
		})
	}
}
