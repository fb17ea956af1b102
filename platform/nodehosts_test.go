package platform

import (
	"slices"
	"testing"
)

func TestNodeHosts(t *testing.T) {
	dstack, err := Detect(env(map[string]string{"DSTACK_NODE_RANK": "1", "DSTACK_NODES_NUM": "4", "DSTACK_MASTER_NODE_IP": "10.0.0.1",
		"DSTACK_NODES_IPS": "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4"}))
	if err != nil {
		t.Fatal(err)
	}
	indexed, err := DetectFrom(pod(map[string]string{"JOB_COMPLETION_INDEX": "3"}, "train-3", k8sHosts))
	if err != nil {
		t.Fatal(err)
	}
	slurm, err := Detect(env(map[string]string{"SLURM_NODEID": "0", "SLURM_JOB_ID": "7", "SLURM_NNODES": "4", "SLURM_JOB_NODELIST": "n[1-4]"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		d    Detected
		n    int
		want []string
	}{
		{"dstack", dstack, 3, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		{"dstack, more than it names", dstack, 5, nil},
		{"indexed job", indexed, 3, []string{"train-0.train.ml.svc.cluster.local", "train-1.train.ml.svc.cluster.local", "train-2.train.ml.svc.cluster.local"}},
		{"slurm names no nodes here", slurm, 3, nil},
		{"nothing detected", Detected{NodeRank: -1}, 3, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, from, ok := tt.d.NodeHosts(tt.n)
			if ok != (tt.want != nil) || !slices.Equal(got, tt.want) || ok && from == "" {
				t.Errorf("NodeHosts(%d) = %q, %q, %v; want %q", tt.n, got, from, ok, tt.want)
			}
		})
	}
}

func TestIndexedHost(t *testing.T) {
	for _, tt := range []struct {
		zero string
		i    int
		want string
	}{
		{"job-0.sub.ns.svc.cluster.local", 2, "job-2.sub.ns.svc.cluster.local"},
		{"my-job-0.sub", 11, "my-job-11.sub"},
		{"job-1.sub", 2, ""}, // not index 0's name
		{"job-0", 2, ""},     // no subdomain: it would not resolve
	} {
		got, ok := IndexedHost(tt.zero, tt.i)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("IndexedHost(%q, %d) = %q, %v; want %q", tt.zero, tt.i, got, ok, tt.want)
		}
	}
}
