package rendezvous

import (
	"fmt"
	"slices"
	"testing"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestNaturalCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"node2", "node10", -1},
		{"node10", "node2", 1},
		{"node10", "node10", 0},
		{"node1", "node1a", -1},
		{"gpu2-node10", "gpu10-node1", -1},
		{"gpu2-node10", "gpu2-node9", 1},
		{"node01", "node1", -1}, // equal values: plain order decides
		{"a", "b", -1},
		{"node", "node0", -1},
		{"rack1.n3", "rack1.n12", -1},
	}
	for _, tt := range tests {
		if got := naturalCompare(tt.a, tt.b); got != tt.want {
			t.Errorf("naturalCompare(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// placeNode is a node of a placement test: its CPUs and GPUs, its explicit
// node rank (-1: none) and the workers already running on it.
type placeNode struct {
	name    string
	cpus    int32
	gpus    int
	rank    int32
	workers int32
}

// jobNodes is the nodes of job id's round, by node rank.
func jobNodes(t *testing.T, s *Store, id string) []string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range s.jobs[id].round.nodes {
		out = append(out, n.info.GetName())
	}
	return out
}

func TestPlacementSpreads(t *testing.T) {
	tests := []struct {
		name  string
		nodes []placeNode
		spec  *musterv1.JobSpec
		want  []string // node names by node rank
	}{
		{"idle nodes in natural order",
			[]placeNode{{"node10", 4, 0, -1, 0}, {"node2", 4, 0, -1, 0}, {"node1", 4, 0, -1, 0}},
			&musterv1.JobSpec{Nnodes: 2, Nproc: 1}, []string{"node1", "node2"}},
		{"the least loaded nodes; node ranks by name",
			[]placeNode{{"node1", 4, 0, -1, 2}, {"node2", 4, 0, -1, 0}, {"node10", 4, 0, -1, 0}},
			&musterv1.JobSpec{Nnodes: 2, Nproc: 1}, []string{"node2", "node10"}},
		{"workers count against CPUs",
			[]placeNode{{"a", 16, 0, -1, 4}, {"b", 2, 0, -1, 1}},
			&musterv1.JobSpec{Nnodes: 1, Nproc: 1}, []string{"a"}},
		{"a node reporting no CPUs counts one",
			[]placeNode{{"a", 0, 0, -1, 1}, {"b", 4, 0, -1, 2}},
			&musterv1.JobSpec{Nnodes: 1, Nproc: 1}, []string{"b"}},
		{"explicit node ranks come first, loaded or not",
			[]placeNode{{"a", 4, 0, -1, 0}, {"z", 4, 0, 0, 8}},
			&musterv1.JobSpec{Nnodes: 1, Nproc: 1}, []string{"z"}},
		{"listed hosts keep their order",
			[]placeNode{{"a", 4, 0, -1, 3}, {"b", 4, 0, -1, 0}},
			&musterv1.JobSpec{Nnodes: 1, Nproc: 1, Hosts: []string{"a", "b"}}, []string{"a"}},
		{"jobs with GPUs pack in name order",
			[]placeNode{{"node1", 4, 2, -1, 1}, {"node2", 4, 2, -1, 0}},
			&musterv1.JobSpec{Nnodes: 1, Gpus: 1}, []string{"node1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStrictStore(t)
			for i, pn := range tt.nodes {
				n := &musterv1.Node{Name: pn.name, Addr: fmt.Sprintf("10.0.0.%d", i+1), Rank: pn.rank, Cpus: pn.cpus}
				for g := range pn.gpus {
					n.Gpus = append(n.Gpus, &musterv1.GPU{Index: int32(g)})
				}
				if _, err := s.Register(n, "", nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			// The load: a job pinned to each node, without GPUs.
			for _, pn := range tt.nodes {
				if pn.workers == 0 {
					continue
				}
				spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("x")}, Nnodes: 1, Nproc: pn.workers, Hosts: []string{pn.name}}
				if _, err := s.Submit(spec, nil, ""); err != nil {
					t.Fatal(err)
				}
			}
			tt.spec.Argv = [][]byte{[]byte("x")}
			id, err := s.Submit(tt.spec, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := jobNodes(t, s, id); !slices.Equal(got, tt.want) {
				t.Errorf("job on %v, want %v", got, tt.want)
			}
		})
	}
}

// Many small jobs on many idle nodes: each node takes one before any takes two.
func TestPlacementSpreadsManyJobs(t *testing.T) {
	s := newStrictStore(t)
	for i := 1; i <= 30; i++ {
		n := &musterv1.Node{Name: fmt.Sprintf("node%d", i), Addr: fmt.Sprintf("10.0.0.%d", i), Rank: -1, Cpus: 8}
		if _, err := s.Register(n, "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	count := map[string]int{}
	for i := range 50 {
		id, err := s.Submit(&musterv1.JobSpec{Argv: [][]byte{[]byte("x")}, Nnodes: 1, Nproc: 2}, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		got := jobNodes(t, s, id)
		count[got[0]]++
		// Idle nodes are taken in natural order: node1, node2, ... node30.
		if want := fmt.Sprintf("node%d", i%30+1); got[0] != want {
			t.Errorf("job %d on %s, want %s", i, got[0], want)
		}
	}
	for i := 1; i <= 30; i++ {
		name := fmt.Sprintf("node%d", i)
		if want := 1 + btoi(i <= 20); count[name] != want {
			t.Errorf("%s runs %d jobs, want %d", name, count[name], want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
