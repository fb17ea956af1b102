// Package fabric is a node's place in the cluster's network: a path of
// levels from the widest to the deepest (block=b1,switch=s3), given with
// the agent's --topology, read from Slurm's topology, or from the GPUs'
// NVLink fabric. The store orders node ranks by it, so that consecutive
// ranks share a switch.
package fabric

import (
	"fmt"
	"strings"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

const (
	// MaxLevels bounds a path's levels.
	MaxLevels = 8
	// MaxBytes bounds a level's name and its value, each.
	MaxBytes = 64
)

// Level is one level of a path: its name (switch) and the node's value
// there (s3).
type Level struct {
	Name, Value string
}

// Path is a node's levels, widest first.
type Path []Level

// Parse reads a path written NAME=VALUE,NAME=VALUE (block=b1,switch=s3),
// widest level first, and checks it. "" is no path.
func Parse(s string) (Path, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > MaxLevels*(2*MaxBytes+2) {
		return nil, fmt.Errorf("%d bytes, more than %d levels of NAME=VALUE can take", len(s), MaxLevels)
	}
	var p Path
	for item := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("level %q: want NAME=VALUE, such as switch=s3", item)
		}
		p = append(p, Level{Name: name, Value: value})
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

// Check says whether p is a path the store takes: at most MaxLevels
// levels, each name distinct, names and values of at most MaxBytes bytes
// of letters, digits, '.', '_', '-' and ':' (a name begins with a letter).
func (p Path) Check() error {
	if len(p) > MaxLevels {
		return fmt.Errorf("%d levels, more than %d", len(p), MaxLevels)
	}
	seen := map[string]bool{}
	for _, l := range p {
		if err := checkWord("level name", l.Name); err != nil {
			return err
		}
		if c := l.Name[0]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return fmt.Errorf("level name %q: want a letter first", l.Name)
		}
		if seen[l.Name] {
			return fmt.Errorf("level %q given twice", l.Name)
		}
		seen[l.Name] = true
		if err := checkWord("level "+l.Name+"'s value", l.Value); err != nil {
			return err
		}
	}
	return nil
}

func checkWord(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > MaxBytes {
		return fmt.Errorf("%s %.20q...: %d bytes, more than %d", what, s, len(s), MaxBytes)
	}
	for i := 0; i < len(s); i++ {
		if !wordByte(s[i]) {
			return fmt.Errorf("%s %q: byte %d (%q) is none of letters, digits, '.', '_', '-', ':'", what, s, i, s[i])
		}
	}
	return nil
}

func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':'
}

// String writes p as Parse reads it.
func (p Path) String() string {
	var b strings.Builder
	for i, l := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.Name)
		b.WriteByte('=')
		b.WriteString(l.Value)
	}
	return b.String()
}

// Proto is p as a node registers it.
func (p Path) Proto() []*musterv1.FabricLevel {
	var out []*musterv1.FabricLevel
	for _, l := range p {
		out = append(out, &musterv1.FabricLevel{Name: l.Name, Value: l.Value})
	}
	return out
}

// FromProto is the path a node registered.
func FromProto(levels []*musterv1.FabricLevel) Path {
	var p Path
	for _, l := range levels {
		p = append(p, Level{Name: l.GetName(), Value: l.GetValue()})
	}
	return p
}
