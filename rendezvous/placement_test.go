package rendezvous_test

import (
	"context"
	"slices"
	"testing"

	"github.com/musterhq/muster/progress"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous/rendezvoustest"
	"github.com/musterhq/muster/security"
)

func TestPlacement(t *testing.T) {
	// Nodes a, b, c on 10.0.0.1, .2, .3, one GPU each; z has node rank 0.
	tests := []struct {
		name string
		busy string // a node a first job takes whole
		spec *musterv1.JobSpec
		want []string // node names by node rank
	}{
		{"without hosts", "", &musterv1.JobSpec{Nnodes: 2}, []string{"z", "a"}},
		{"hosts give node ranks", "", &musterv1.JobSpec{Nnodes: 2, Hosts: []string{"c", "a"}}, []string{"c", "a"}},
		{"hosts before explicit node ranks", "", &musterv1.JobSpec{Nnodes: 2, Hosts: []string{"a", "z"}}, []string{"a", "z"}},
		{"by address", "", &musterv1.JobSpec{Nnodes: 2, Hosts: []string{"10.0.0.2", "a"}}, []string{"b", "a"}},
		{"fewer nodes than hosts", "", &musterv1.JobSpec{Nnodes: 2, Hosts: []string{"b", "c", "a"}}, []string{"b", "c"}},
		{"a busy listed node is skipped", "b", &musterv1.JobSpec{Nnodes: 2, Gpus: 1, Hosts: []string{"b", "c", "a"}}, []string{"c", "a"}},
		{"exclude by name", "", &musterv1.JobSpec{Nnodes: 2, Exclude: []string{"z"}}, []string{"a", "b"}},
		{"exclude by address", "", &musterv1.JobSpec{Nnodes: 3, Exclude: []string{"10.0.0.2"}}, []string{"z", "a", "c"}},
		{"exclude a listed host", "", &musterv1.JobSpec{Nnodes: 2, Hosts: []string{"c", "b", "a"}, Exclude: []string{"10.0.0.2"}}, []string{"c", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rendezvoustest.NewStore(t, nil)
			c := rendezvoustest.NewClient(t, s, security.Security{})
			agents := map[string]*testAgent{
				"a": newTestAgent(t, c, "a", "10.0.0.1", -1, 1),
				"b": newTestAgent(t, c, "b", "10.0.0.2", -1, 1),
				"c": newTestAgent(t, c, "c", "10.0.0.3", -1, 1),
				"z": newTestAgent(t, c, "z", "10.0.0.4", 0, 1),
			}
			ctx := context.Background()
			if tt.busy != "" {
				_, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{Argv: byteStrings("x"), Nnodes: 1, Gpus: 1, Hosts: []string{tt.busy}}})
				if err != nil {
					t.Fatal(err)
				}
				reservePorts(t, c, agents[tt.busy], 1000, 1001)
				agents[tt.busy].next()
			}
			tt.spec.Argv = byteStrings("x")
			sub, err := c.Submit(ctx, &musterv1.SubmitRequest{Spec: tt.spec})
			if err != nil {
				t.Fatal(err)
			}
			reservePorts(t, c, agents[tt.want[0]], 29500, 29501)
			master := ""
			for rank, name := range tt.want {
				asg := agents[name].next().GetStart()
				if rank == 0 {
					master = asg.GetMasterAddr()
				}
				if asg.GetJobId() != sub.JobId || asg.GetNodeRank() != int32(rank) || asg.GetMasterAddr() != master ||
					!slices.Equal(asg.GetNodeNames(), tt.want) {
					t.Errorf("node %s: assignment %v, want node rank %d of %v", name, asg, rank, tt.want)
				}
			}
			// The nodes not picked have no part in the job.
			for _, st := range s.Store().Nodes() {
				if in := slices.Contains(st.Jobs, sub.JobId); in != slices.Contains(tt.want, st.Node.GetName()) {
					t.Errorf("node %s runs the job: %v", st.Node.GetName(), in)
				}
			}
		})
	}
}

func TestPlacementWaitsForListedHost(t *testing.T) {
	s := rendezvoustest.NewStore(t, nil)
	c := rendezvoustest.NewClient(t, s, security.Security{})
	a := newTestAgent(t, c, "a", "10.0.0.1", -1, 0)
	newTestAgent(t, c, "b", "10.0.0.2", -1, 0) // registered, never listed
	sub, err := c.Submit(context.Background(), &musterv1.SubmitRequest{Spec: &musterv1.JobSpec{
		Argv: byteStrings("x"), Nnodes: 2, Hosts: []string{"c", "a"}, WaitTimeoutMs: 60_000}})
	if err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, c, sub.JobId)
	if w := progress.DescribeWaiting(nextWaiting(t, evs)); w != "1 of 2 ready (a); 1 missing; not usable: listed host c is not registered" {
		t.Fatalf("progress: %s", w)
	}
	// c comes: the round forms with it as node rank 0, as listed.
	cAgent := newTestAgent(t, c, "c", "10.0.0.3", -1, 0)
	reservePorts(t, c, cAgent, 29500, 29501)
	for want, ag := range []*testAgent{cAgent, a} {
		if asg := ag.next().GetStart(); asg.GetNodeRank() != int32(want) || asg.GetMasterAddr() != "10.0.0.3" {
			t.Errorf("node rank %d: assignment %v", want, asg)
		}
	}
}
