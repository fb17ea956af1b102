package entrypoint

import (
	"slices"
	"strings"
	"testing"

	"github.com/musterhq/muster/platform"
)

func TestResolveStoreReplicas(t *testing.T) {
	base := Config{NodeRank: -1, Token: testToken, Argv: []string{"true"}, NNodes: 4, MinNodes: 3}
	none := platform.Detected{NodeRank: -1, From: map[string]string{}}
	dstack := platform.Detected{Platform: platform.Dstack, RdzvHost: "10.0.0.1", NNodes: 4, NodeRank: 2,
		NodeAddrs: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"},
		From:      map[string]string{"RdzvHost": "DSTACK_MASTER_NODE_IP", "NodeRank": "DSTACK_NODE_RANK", "NodeAddrs": "DSTACK_NODES_IPS"}}
	pod := platform.Detected{Platform: platform.KubernetesIndexedJob, RdzvHost: "train-0.train.ml.svc.cluster.local", NodeRank: 1,
		From: map[string]string{"RdzvHost": "hostname and /etc/hosts", "NodeRank": "JOB_COMPLETION_INDEX"}}
	tests := []struct {
		name  string
		edit  func(*Config)
		det   platform.Detected
		peers []string // want; nil: not replicated
		err   string
	}{
		{"no flag: one store", func(c *Config) { c.Rdzv = "h" }, dstack, nil, ""},
		{"one replica is one store", func(c *Config) { c.Rdzv, c.StoreReplicas = "h", 1 }, dstack, nil, ""},
		{"from dstack", func(c *Config) { c.StoreReplicas = 3 }, dstack,
			[]string{"10.0.0.1:29400", "10.0.0.2:29400", "10.0.0.3:29400"}, ""},
		{"from an indexed Job's pod names", func(c *Config) { c.StoreReplicas = 3 }, pod,
			[]string{"train-0.train.ml.svc.cluster.local:29400", "train-1.train.ml.svc.cluster.local:29400", "train-2.train.ml.svc.cluster.local:29400"}, ""},
		{"flags win, with ports of their own or --rdzv's", func(c *Config) {
			c.StoreReplicas, c.NodeRank, c.Rdzv = 3, 0, "a:1234"
			c.StorePeers = []string{"a", "b:99", "[fd00::3]"}
		}, dstack, []string{"a:1234", "b:99", "[fd00::3]:1234"}, ""},
		{"--store-peers alone gives the count", func(c *Config) { c.NodeRank, c.StorePeers = 0, []string{"a", "b", "c"} }, none,
			[]string{"a:29400", "b:29400", "c:29400"}, ""},
		{"two replicas", func(c *Config) { c.StoreReplicas = 2 }, dstack, nil, "want 0 or 1"},
		{"more replicas than nodes", func(c *Config) { c.StoreReplicas, c.NNodes, c.MinNodes = 5, 4, 0 }, dstack, nil, "more replicas than the job's 4 nodes"},
		{"peers unknown", func(c *Config) { c.StoreReplicas, c.NodeRank, c.Rdzv = 3, 0, "h" }, none, nil, "give --store-peers"},
		{"rank unknown", func(c *Config) { c.StoreReplicas, c.StorePeers = 3, []string{"a", "b", "c"} }, none, nil, "give --node-rank"},
		{"peers miscounted", func(c *Config) { c.StoreReplicas, c.NodeRank, c.StorePeers = 3, 0, []string{"a", "b"} }, none, nil, "lists 2 replicas"},
		{"a peer twice", func(c *Config) { c.NodeRank, c.StorePeers = 0, []string{"a", "b", "a:29400"} }, none, nil, "listed twice"},
		{"a bad peer", func(c *Config) { c.NodeRank, c.StorePeers = 0, []string{"a", "b", "0.0.0.0"} }, none, nil, "--store-peers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			if tt.edit != nil {
				tt.edit(&cfg)
			}
			p, err := Resolve(cfg, tt.det, func(flag string) bool { return flag == "nnodes" || (flag == "node-rank" && cfg.NodeRank >= 0) })
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Peers, tt.peers) || p.Replicated() != (tt.peers != nil) {
				t.Fatalf("peers %q, want %q", p.Peers, tt.peers)
			}
			if tt.peers == nil {
				return
			}
			if cfg.Rdzv == "" && p.Endpoint() != tt.peers[0] {
				t.Errorf("rendezvous %s, want the first replica %s", p.Endpoint(), tt.peers[0])
			}
			lines := strings.Join(p.Describe("test"), "\n")
			if !strings.Contains(lines, "store: 3 replicas, on node ranks 0..2: "+strings.Join(tt.peers, ",")) {
				t.Errorf("Describe:\n%s", lines)
			}
		})
	}
}

// Without replicas, what agent run says it does is as it was.
func TestDescribeWithoutReplicasUnchanged(t *testing.T) {
	p, err := Resolve(Config{NodeRank: -1, Token: testToken, Argv: []string{"true"}, Rdzv: "h", NNodes: 2},
		platform.Detected{NodeRank: -1}, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range p.Describe("test") {
		if strings.HasPrefix(l, "store: ") {
			t.Errorf("a store line without replicas: %s", l)
		}
	}
}
