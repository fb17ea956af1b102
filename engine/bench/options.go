// Package bench measures NCCL collectives from inside a muster job and prints
// the results in nccl-tests' table layout, so numbers compare line by line.
package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/musterhq/muster/engine"
)

// Options are nccl-tests' knobs, with its defaults.
type Options struct {
	Collective  Collective
	MinBytes    int64
	MaxBytes    int64
	StepBytes   int64
	StepFactor  int64 // > 1 multiplies; otherwise StepBytes is added
	Iters       int
	WarmupIters int
	Check       int // rounds of result checking after timing; 0 skips it
	DataType    engine.DataType
	Op          engine.RedOp
	Root        int
}

// DefaultOptions are nccl-tests' defaults: one 32 MiB size, 20 timed and one
// warm-up iteration, checked float sums.
func DefaultOptions(c Collective) Options {
	return Options{
		Collective: c, MinBytes: 32 << 20, MaxBytes: 32 << 20, StepBytes: 1 << 20, StepFactor: 1,
		Iters: 20, WarmupIters: 1, Check: 1, DataType: engine.Float32, Op: engine.Sum, Root: 0,
	}
}

// ParseSize reads a byte count with an optional binary suffix: 8, 64K, 1.5M, 4G.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			t = strings.TrimSpace(t[:n-1])
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("invalid size %q (want a byte count such as 8, 64K, 1M, 4G)", s)
	}
	b := v * mult
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}

// Validate checks the options against a world of nranks.
func (o Options) Validate(nranks int) error {
	switch {
	case o.MinBytes > o.MaxBytes:
		return fmt.Errorf("minbytes %d is larger than maxbytes %d", o.MinBytes, o.MaxBytes)
	case o.StepFactor <= 1 && o.StepBytes <= 0:
		return fmt.Errorf("stepbytes must be positive when stepfactor is not above 1")
	case o.Iters < 1:
		return fmt.Errorf("iters must be at least 1")
	case o.WarmupIters < 0:
		return fmt.Errorf("warmup_iters must not be negative")
	case o.Check < 0:
		return fmt.Errorf("check must not be negative")
	case o.DataType.Size() == 0:
		return fmt.Errorf("unsupported datatype %v", o.DataType)
	case o.Collective.rooted() && (o.Root < 0 || o.Root >= nranks):
		return fmt.Errorf("root %d is not a rank of a world of %d", o.Root, nranks)
	}
	return nil
}

// Sizes lists the sizes measured, from MinBytes to MaxBytes.
func (o Options) Sizes() []int64 {
	var out []int64
	for s := o.MinBytes; s <= o.MaxBytes; {
		out = append(out, s)
		next := s + o.StepBytes
		if o.StepFactor > 1 {
			next = s * o.StepFactor
		}
		if next <= s { // zero size with a factor, or overflow
			break
		}
		s = next
	}
	return out
}

// warmupSizes doubles from MinBytes to MaxBytes, as nccl-tests warms up.
func (o Options) warmupSizes() []int64 {
	var out []int64
	for s := o.MinBytes; s <= o.MaxBytes; s *= 2 {
		out = append(out, s)
		if s == 0 {
			break
		}
	}
	return out
}
