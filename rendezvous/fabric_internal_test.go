package rendezvous

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/musterhq/muster/fabric"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func TestFabricNodeRanks(t *testing.T) {
	// A node is NAME, NAME@PATH or NAME#RANK (an explicit node rank).
	tests := []struct {
		name  string
		nodes []string
		hosts []string
		want  []string // node names by node rank
	}{
		{"no paths: by name", []string{"n10", "n2", "n1"}, nil, []string{"n1", "n2", "n10"}},
		{"by switch, then by name",
			[]string{"n1@switch=s2", "n2@switch=s1", "n3@switch=s2", "n4@switch=s1"}, nil,
			[]string{"n2", "n4", "n1", "n3"}},
		{"levels widest first, values in natural order",
			[]string{"n1@block=b10,switch=s1", "n2@block=b2,switch=s9", "n3@block=b2,switch=s10", "n4@block=b10,switch=s0"}, nil,
			[]string{"n2", "n3", "n4", "n1"}},
		{"a shorter path first", []string{"n1@block=b1,switch=s1", "n2@block=b1"}, nil, []string{"n2", "n1"}},
		{"nodes without a path last",
			[]string{"n1", "n2@switch=s9", "n3", "n4@switch=s1"}, nil,
			[]string{"n4", "n2", "n1", "n3"}},
		{"explicit node ranks first",
			[]string{"n1@switch=s1", "n2#0", "n3@switch=s0"}, nil,
			[]string{"n2", "n3", "n1"}},
		{"hosts without paths keep their order", []string{"a", "b", "c"}, []string{"c", "a", "b"}, []string{"c", "a", "b"}},
		{"the first host is node rank 0; its switch follows, then the switches after it, then those before",
			[]string{"a@switch=s1", "b@switch=s2", "c@switch=s1", "d@switch=s0", "e@switch=s2", "f@switch=s0"},
			[]string{"e", "a", "b", "c", "d", "f"},
			[]string{"e", "b", "d", "f", "a", "c"}},
		{"a first host without a path: the others in fabric order",
			[]string{"a@switch=s1", "b", "c@switch=s0"}, []string{"b", "a", "c"},
			[]string{"b", "c", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStrictStore(t)
			for i, spec := range tt.nodes {
				n := &musterv1.Node{Addr: fmt.Sprintf("10.0.0.%d", i+1), Rank: -1, Cpus: 4}
				name, path, _ := strings.Cut(spec, "@")
				n.Name = name
				if name, rank, ok := strings.Cut(name, "#"); ok {
					r, err := strconv.Atoi(rank)
					if err != nil {
						t.Fatal(err)
					}
					n.Name, n.Rank = name, int32(r)
				}
				p, err := fabric.Parse(path)
				if err != nil {
					t.Fatal(err)
				}
				n.Fabric = p.Proto()
				if _, err := s.Register(n, "", nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			spec := &musterv1.JobSpec{Argv: [][]byte{[]byte("x")}, Nnodes: int32(len(tt.want)), Nproc: 1, Hosts: tt.hosts}
			id, err := s.Submit(spec, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := jobNodes(t, s, id); !slices.Equal(got, tt.want) {
				t.Errorf("node ranks %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRegisterChecksFabric(t *testing.T) {
	long := strings.Repeat("x", fabric.MaxBytes+1)
	var nine []*musterv1.FabricLevel
	for i := range fabric.MaxLevels + 1 {
		nine = append(nine, &musterv1.FabricLevel{Name: fmt.Sprintf("l%d", i), Value: "v"})
	}
	tests := []struct {
		name   string
		levels []*musterv1.FabricLevel
		want   string // in the error; "" for none
	}{
		{"none", nil, ""},
		{"two levels", []*musterv1.FabricLevel{{Name: "block", Value: "b1"}, {Name: "switch", Value: "s3"}}, ""},
		{"too many levels", nine, "9 levels, more than 8"},
		{"a long value", []*musterv1.FabricLevel{{Name: "switch", Value: long}}, "more than 64"},
		{"a long name", []*musterv1.FabricLevel{{Name: long, Value: "s1"}}, "more than 64"},
		{"an empty value", []*musterv1.FabricLevel{{Name: "switch"}}, "is empty"},
		{"a name twice", []*musterv1.FabricLevel{{Name: "switch", Value: "a"}, {Name: "switch", Value: "b"}}, "given twice"},
		{"a comma", []*musterv1.FabricLevel{{Name: "switch", Value: "a,b"}}, "none of letters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStrictStore(t)
			_, err := s.Register(&musterv1.Node{Name: "n1", Addr: "10.0.0.1", Rank: -1, Fabric: tt.levels}, "", nil, nil)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Register: %v, want %q", err, tt.want)
			}
		})
	}
}
