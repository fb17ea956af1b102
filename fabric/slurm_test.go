package fabric

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// treeTopology is topology/tree's `scontrol show topology`: two leaf
// switches under a spine, the spine and a lone leaf under the core.
const treeTopology = `SwitchName=leaf0 Level=0 LinkSpeed=1 Nodes=gpu[01-04]
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[05-08]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=gpu[09-10],login1
SwitchName=spine0 Level=1 LinkSpeed=1 Switches=leaf[0-1] Nodes=gpu[01-08]
SwitchName=core Level=2 LinkSpeed=1 Switches=spine0,leaf2 Nodes=gpu[01-10],login1
`

// blockTopology is topology/block's.
const blockTopology = `BlockName=b1 BlockIndex=0 Nodes=node[01-04] BlockSize=4
BlockName=b2 BlockIndex=1 Nodes=node[05-08] BlockSize=4
`

func TestFromSlurmTopology(t *testing.T) {
	tests := []struct {
		name string
		out  string
		node string
		want string // the path; an error's text when err
		err  bool
	}{
		{"a leaf under a spine", treeTopology, "gpu03", "switch2=core,switch1=spine0,switch0=leaf0", false},
		{"the other leaf", treeTopology, "gpu05", "switch2=core,switch1=spine0,switch0=leaf1", false},
		{"a leaf under the core", treeTopology, "login1", "switch2=core,switch0=leaf2", false},
		{"one switch", "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[01-04]\n", "node02", "switch0=s1", false},
		{"a block", blockTopology, "node06", "block=b2", false},
		{"unknown keys and blank lines", "\n  SwitchName=s1 Level=0 Foo=bar Nodes=a,b  \n\n", "b", "switch0=s1", false},
		{"a node in no switch", treeTopology, "gpu99", "node gpu99 is under no switch", true},
		{"no topology", "", "gpu01", "under no switch or block", true},
		{"a level that is no number", "SwitchName=s1 Level=x Nodes=a\n", "a", `level "x" is not a number`, true},
		{"a switch name the store refuses", "SwitchName=s,1 Level=0 Nodes=a\n", "a", "none of letters", true},
		{"a broken host list holds nothing", "SwitchName=s1 Level=0 Nodes=a[1-\n", "a1", "under no switch", true},
		{"a cycle ends at its top", "SwitchName=a Level=0 Nodes=n1 Switches=b\nSwitchName=b Level=1 Switches=a\n", "n1", "switch1=b,switch0=a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := FromSlurmTopology([]byte(tt.out), tt.node)
			if tt.err {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil || p.String() != tt.want {
				t.Errorf("path %q, %v; want %q", p, err, tt.want)
			}
		})
	}
}

func TestFromSlurmTopologyBounds(t *testing.T) {
	if _, err := FromSlurmTopology(make([]byte, MaxSlurmOutput+1), "a"); err == nil {
		t.Error("an output over the bound is taken")
	}
	var deep strings.Builder
	deep.WriteString("SwitchName=s0 Level=0 Nodes=n1\n")
	for l := 1; l <= MaxLevels; l++ {
		deep.WriteString("SwitchName=s" + string(rune('0'+l)) + " Level=" + string(rune('0'+l)) + " Switches=s" + string(rune('0'+l-1)) + "\n")
	}
	if _, err := FromSlurmTopology([]byte(deep.String()), "n1"); err == nil || !strings.Contains(err.Error(), "more than 8 switch levels") {
		t.Errorf("9 levels: %v", err)
	}
}

func FuzzFromSlurmTopology(f *testing.F) {
	f.Add([]byte(treeTopology), "gpu03")
	f.Add([]byte(blockTopology), "node01")
	f.Add([]byte("SwitchName=a Level=0 Nodes=n[1-3] Switches=b\nSwitchName=b Level=1 Switches=a\n"), "n2")
	f.Fuzz(func(t *testing.T, out []byte, node string) {
		p, err := FromSlurmTopology(out, node)
		if err != nil {
			return
		}
		// A path found is one the store takes.
		if len(p) == 0 || p.Check() != nil {
			t.Fatalf("path %v: %v", p, p.Check())
		}
	})
}

func TestDetect(t *testing.T) {
	env := func(vars ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(vars); i += 2 {
				if vars[i] == k {
					return vars[i+1]
				}
			}
			return ""
		}
	}
	tree := func(context.Context) ([]byte, error) { return []byte(treeTopology), nil }
	failing := func(context.Context) ([]byte, error) { return nil, errors.New("scontrol: not found") }
	gpus := func() ([16]byte, uint32, error) { return [16]byte{0xab, 15: 1}, 3, nil }
	noGPUs := func() ([16]byte, uint32, error) { return [16]byte{}, 0, errors.New("nvml: no library") }
	tests := []struct {
		name     string
		src      Sources
		want     string
		wantFrom string
	}{
		{"Slurm's node name", Sources{Getenv: env("SLURM_JOB_ID", "7", "SLURMD_NODENAME", "gpu05"), Hostname: "x", Scontrol: tree},
			"switch2=core,switch1=spine0,switch0=leaf1", "scontrol show topology"},
		{"the short host name", Sources{Getenv: env("SLURM_JOB_ID", "7"), Hostname: "gpu01.cluster.local", Scontrol: tree},
			"switch2=core,switch1=spine0,switch0=leaf0", "scontrol show topology"},
		{"outside an allocation Slurm is not asked", Sources{Getenv: env(), Hostname: "gpu01", Scontrol: tree}, "", ""},
		{"scontrol failing, the GPUs' fabric", Sources{Getenv: env("SLURM_JOB_ID", "7"), Hostname: "gpu01", Scontrol: failing, GPUFabric: gpus},
			"fabric=ab000000-0000-0000-0000-000000000001,clique=3", "NVML GPU fabric"},
		{"no GPU fabric", Sources{Getenv: env(), GPUFabric: noGPUs}, "", ""},
		{"a zero cluster UUID", Sources{Getenv: env(), GPUFabric: func() ([16]byte, uint32, error) { return [16]byte{}, 0, nil }}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, from := Detect(context.Background(), zaptest.NewLogger(t), tt.src)
			if p.String() != tt.want || from != tt.wantFrom {
				t.Errorf("Detect = %q from %q, want %q from %q", p, from, tt.want, tt.wantFrom)
			}
		})
	}
}

// scontrol as a script on PATH: its output taken, its failure and its
// silence bounded.
func TestScontrolTopology(t *testing.T) {
	tests := []struct {
		name   string
		script string // "" for no scontrol at all
		want   string // the output; an error's text when err
		err    bool
	}{
		{"its output", "printf 'SwitchName=s1 Level=0 Nodes=a\\n'", "SwitchName=s1 Level=0 Nodes=a\n", false},
		{"missing", "", "scontrol show topology", true},
		{"failing", "echo 'slurm_load_topo error: Unable to contact slurm controller' >&2; exit 1", "Unable to contact slurm controller", true},
		{"silent", "exec sleep 30", "no answer within", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.script != "" {
				if err := os.WriteFile(filepath.Join(dir, "scontrol"), []byte("#!/bin/sh\n"+tt.script+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PATH", dir+":/usr/bin:/bin")
			out, err := ScontrolTopology(context.Background(), 300*time.Millisecond)
			if tt.err {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil || string(out) != tt.want {
				t.Errorf("output %q, %v; want %q", out, err, tt.want)
			}
		})
	}
}
