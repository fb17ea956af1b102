package fabric

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster/hostfile"
)

// MaxSlurmOutput bounds the scontrol output read: a topology of thousands
// of switches fits many times over.
const MaxSlurmOutput = 4 << 20

// slurmSwitch is one line of topology/tree's output:
//
//	SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[01-04]
//	SwitchName=s2 Level=1 LinkSpeed=1 Switches=s[0-1] Nodes=node[01-08]
type slurmSwitch struct {
	name     string
	level    int
	nodes    string
	switches string
	line     int
}

// FromSlurmTopology finds node's path in the output of `scontrol show
// topology`: under topology/tree, the switches from the root down to the
// lowest one whose nodes hold it, each level named switchL for its Slurm
// level L (switch1=spine0,switch0=leaf3); under topology/block, its block
// (block=b1). A node in no switch or block is an error.
func FromSlurmTopology(out []byte, node string) (Path, error) {
	if len(out) > MaxSlurmOutput {
		return nil, fmt.Errorf("scontrol output of %d bytes, more than %d", len(out), MaxSlurmOutput)
	}
	var switches []slurmSwitch
	for i, line := range strings.Split(string(out), "\n") {
		fields := keyValues(line)
		if block, ok := fields["BlockName"]; ok {
			if holds(fields["Nodes"], node) {
				p := Path{{Name: "block", Value: block}}
				return p, p.Check()
			}
			continue
		}
		name, ok := fields["SwitchName"]
		if !ok {
			continue
		}
		level, err := strconv.Atoi(fields["Level"])
		if err != nil || level < 0 {
			return nil, fmt.Errorf("switch %s: level %q is not a number", name, fields["Level"])
		}
		switches = append(switches, slurmSwitch{name: name, level: level, nodes: fields["Nodes"], switches: fields["Switches"], line: i})
	}
	// The lowest switch that holds the node is its leaf; upper switches list
	// their leaves' nodes too.
	slices.SortStableFunc(switches, func(a, b slurmSwitch) int { return cmp.Compare(a.level, b.level) })
	leaf := slices.IndexFunc(switches, func(s slurmSwitch) bool { return holds(s.nodes, node) })
	if leaf < 0 {
		return nil, fmt.Errorf("node %s is under no switch or block", node)
	}
	chain := []slurmSwitch{switches[leaf]}
	for cur := switches[leaf]; ; {
		up := slices.IndexFunc(switches, func(s slurmSwitch) bool { return s.level > cur.level && holds(s.switches, cur.name) })
		if up < 0 {
			break
		}
		cur = switches[up]
		if len(chain) == MaxLevels {
			return nil, fmt.Errorf("node %s: more than %d switch levels above it", node, MaxLevels)
		}
		chain = append(chain, cur)
	}
	var p Path
	for _, s := range slices.Backward(chain) {
		p = append(p, Level{Name: "switch" + strconv.Itoa(s.level), Value: s.name})
	}
	return p, p.Check()
}

// keyValues splits a line of scontrol's KEY=VALUE words.
func keyValues(line string) map[string]string {
	out := map[string]string{}
	for _, word := range strings.Fields(line) {
		if k, v, ok := strings.Cut(word, "="); ok {
			out[k] = v
		}
	}
	return out
}

// holds says whether a Slurm hostlist names name; a list that does not
// expand holds nothing.
func holds(list, name string) bool {
	if list == "" || list == "(null)" {
		return false
	}
	names, err := hostfile.Expand(list)
	return err == nil && slices.Contains(names, name)
}

// ScontrolTopology runs `scontrol show topology`, bounded by timeout, and
// returns its output, at most MaxSlurmOutput bytes of it.
func ScontrolTopology(ctx context.Context, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scontrol", "show", "topology")
	var stdout, stderr limitedBuffer
	stdout.limit, stderr.limit = MaxSlurmOutput+1, 4<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("scontrol show topology: no answer within %s", timeout)
	}
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("scontrol show topology: %w: %s", err, msg)
		}
		return nil, fmt.Errorf("scontrol show topology: %w", err)
	}
	if stdout.Len() > MaxSlurmOutput {
		return nil, errors.New("scontrol show topology: output longer than 4 MiB")
	}
	return stdout.Bytes(), nil
}

// limitedBuffer keeps the first limit bytes written to it and drops the
// rest, so that a child's output cannot grow the agent's memory.
type limitedBuffer struct {
	bytes.Buffer
	limit int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
