package bench

import (
	"testing"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
)

// BenchmarkFabricRing registers a 64-node cluster of 4 switches, whose
// node names and switches disagree (a node's switch is a hash of its
// name), with a store in process, forms a round of a job over all 64
// nodes, and counts the neighbours of the ring of node ranks (i, i+1 mod
// 64) on different switches: with the nodes' fabric paths, and without
// them (name order). An op is a store, its 64 registrations and the round.
func BenchmarkFabricRing(b *testing.B) {
	for _, bc := range []struct {
		name  string
		paths bool
	}{{"paths", true}, {"names", false}} {
		b.Run(bc.name, func(b *testing.B) {
			nodes, switchOf := rendezvoustest.FabricCluster(64, 4, bc.paths)
			crossings := 0
			for b.Loop() {
				s := rendezvous.NewStore(rendezvous.StoreConfig{Logger: zap.NewNop()})
				for _, n := range nodes {
					if _, err := s.Register(n, "", nil, nil); err != nil {
						b.Fatal(err)
					}
				}
				id, err := s.Submit(&musterv1.JobSpec{Argv: [][]byte{[]byte("x")}, Nnodes: 64, Nproc: 1}, nil, "")
				if err != nil {
					b.Fatal(err)
				}
				ranked := s.Job(id).GetNodes()
				if len(ranked) != 64 {
					b.Fatalf("round of %d nodes, want 64", len(ranked))
				}
				crossings = rendezvoustest.RingCrossings(ranked, switchOf)
				s.Close()
			}
			b.ReportMetric(float64(crossings), "switch-crossings")
		})
	}
}
