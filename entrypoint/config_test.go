package entrypoint

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/musterhq/muster/platform"
)

const testToken = "0123456789abcdef0123456789abcdef"

func TestResolve(t *testing.T) {
	base := Config{NodeRank: -1, Token: testToken, Argv: []string{"true"}}
	dstack := platform.Detected{Platform: platform.Dstack, RdzvHost: "10.0.0.1", NNodes: 4, NodeRank: 2, GPUsPerNode: 8,
		From: map[string]string{"RdzvHost": "DSTACK_MASTER_NODE_IP", "NNodes": "DSTACK_NODES_NUM", "NodeRank": "DSTACK_NODE_RANK",
			"GPUsPerNode": "DSTACK_GPUS_PER_NODE"}}
	tests := []struct {
		name  string
		edit  func(*Config)
		det   platform.Detected
		given []string
		check func(*testing.T, *Plan)
		err   string
	}{
		{"flags alone", func(c *Config) { c.Rdzv, c.NNodes = "job-0.svc", 2 }, platform.Detected{NodeRank: -1}, []string{"rdzv", "nnodes"},
			func(t *testing.T, p *Plan) {
				if p.Endpoint() != "job-0.svc:29400" || p.NNodes != 2 || p.NodeRank != -1 || p.From["RdzvHost"] != "--rdzv" {
					t.Errorf("plan %+v", p)
				}
			}, ""},
		{"the platform fills in", nil, dstack, nil, func(t *testing.T, p *Plan) {
			if p.Endpoint() != "10.0.0.1:29400" || p.NNodes != 4 || p.NodeRank != 2 || p.GPUs != 8 ||
				p.From["NodeRank"] != "DSTACK_NODE_RANK" || p.From["RdzvPort"] != "default" {
				t.Errorf("plan %+v", p)
			}
		}, ""},
		{"flags win", func(c *Config) { c.Rdzv, c.NNodes, c.NodeRank, c.NProc = "10.9.9.9:1234", 2, 1, 3 }, dstack,
			[]string{"rdzv", "nnodes", "node-rank", "nproc"}, func(t *testing.T, p *Plan) {
				if p.Endpoint() != "10.9.9.9:1234" || p.NNodes != 2 || p.NodeRank != 1 || p.GPUs != 0 || p.NProc != 3 ||
					p.From["NodeRank"] != "--node-rank" {
					t.Errorf("plan %+v", p)
				}
			}, ""},
		{"elastic from PyTorchJob", nil, platform.Detected{Platform: platform.PyTorchJob, RdzvHost: "m", RdzvPort: 23456, NNodes: 4,
			MinNodes: 2, NodeRank: -1, From: map[string]string{"NNodes": "PET_NNODES", "MinNodes": "PET_NNODES"}}, nil,
			func(t *testing.T, p *Plan) {
				if p.NNodes != 4 || p.MinNodes != 2 || p.Endpoint() != "m:23456" {
					t.Errorf("plan %+v", p)
				}
			}, ""},
		{"IPv6 rendezvous", func(c *Config) { c.Rdzv, c.NNodes = "[fd00::1]:29500", 2 }, platform.Detected{NodeRank: -1}, nil,
			func(t *testing.T, p *Plan) {
				if p.Endpoint() != "[fd00::1]:29500" {
					t.Errorf("endpoint %s", p.Endpoint())
				}
			}, ""},
		{"no node count", func(c *Config) { c.Rdzv = "h" }, platform.Detected{NodeRank: -1}, nil, nil, "--nnodes"},
		{"no rendezvous", func(c *Config) { c.NNodes = 2 }, platform.Detected{NodeRank: -1}, nil, nil, "--rdzv"},
		{"no token", func(c *Config) { c.Rdzv, c.NNodes, c.Token = "h", 2, "" }, platform.Detected{NodeRank: -1}, nil, nil, "MUSTER_TOKEN"},
		{"no command", func(c *Config) { c.Rdzv, c.NNodes, c.Argv = "h", 2, nil }, platform.Detected{NodeRank: -1}, nil, nil, "no command"},
		{"rank beyond the nodes", func(c *Config) { c.Rdzv, c.NNodes, c.NodeRank = "h", 2, 2 }, platform.Detected{NodeRank: -1}, nil, nil, "not below"},
		{"bad port", func(c *Config) { c.Rdzv, c.NNodes = "h:99999", 2 }, platform.Detected{NodeRank: -1}, nil, nil, "not in 1..65535"},
		{"unspecified address", func(c *Config) { c.Rdzv, c.NNodes = "::", 2 }, platform.Detected{NodeRank: -1}, nil, nil, "unspecified"},
		{"indexed Job without its host", func(c *Config) { c.NNodes = 2 }, platform.Detected{Platform: platform.KubernetesIndexedJob, NodeRank: 1},
			nil, nil, "headless Service"},
		{"empty host", func(c *Config) { c.Rdzv, c.NNodes = ":29400", 2 }, platform.Detected{NodeRank: -1}, nil, nil, "no host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			if tt.edit != nil {
				tt.edit(&cfg)
			}
			given := map[string]bool{}
			for _, g := range tt.given {
				given[g] = true
			}
			p, err := Resolve(cfg, tt.det, func(f string) bool { return given[f] })
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
			if lines := p.Describe("test"); len(lines) == 0 || !strings.HasPrefix(lines[0], "platform: ") {
				t.Errorf("describe: %q", lines)
			}
		})
	}
}

func TestDecideRole(t *testing.T) {
	mine := func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.2.3")}, nil
	}
	tests := []struct {
		name     string
		rdzv     string
		rank     int
		host     bool
		wantHost bool
		why      string
	}{
		{"told", "10.9.9.9", -1, true, true, "--rdzv-host"},
		{"node rank 0", "10.9.9.9", 0, false, true, "node rank 0"},
		{"node rank 1 though the address is ours", "10.1.2.3", 1, false, false, "node rank 1"},
		{"our address", "10.1.2.3", -1, false, true, "this node's address 10.1.2.3"},
		{"another address", "10.1.2.4", -1, false, false, "not one of this node's addresses"},
		{"a name for loopback", "localhost", -1, false, true, "this node's address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Plan{Config: Config{Host: tt.host, NodeRank: tt.rank}, RdzvHost: tt.rdzv, RdzvPort: 29400, From: map[string]string{}}
			var stderr bytes.Buffer
			role, err := DecideRole(context.Background(), p, mine, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			if role.Host != tt.wantHost || !strings.Contains(role.Reason, tt.why) {
				t.Fatalf("role %+v, want host %v because %q", role, tt.wantHost, tt.why)
			}
		})
	}
}

func FuzzSplitRdzv(f *testing.F) {
	for _, s := range []string{"h", "h:1", "[::1]:2", "[::1]", ":3", "h:0", "a:b:c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, err := splitRdzv(s)
		if err != nil {
			return
		}
		if _, ipErr := netip.ParseAddr(host); port < 1 || port > 65535 || ipErr != nil && !hostName.MatchString(host) {
			t.Fatalf("%q: host %q port %d", s, host, port)
		}
	})
}
