// Package cmdline holds the command-line habits both muster binaries share:
// flag values that parse as torchrun, mpirun and timeout(1) users expect,
// flags with several names, one-line usage errors with exit code 2, and
// --version.
package cmdline

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Count is a whole-number flag bounded to [min, max], so that a value the
// wire cannot carry (an int32) is refused rather than wrapped around.
type Count struct {
	n, min, max int64
	set         bool
}

// NewCount returns a count flag value of def, accepting min..max.
func NewCount(def, min, max int64) *Count { return &Count{n: def, min: min, max: max} }

func (c *Count) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return fmt.Errorf("at most %d", c.max)
	case err != nil:
		return errors.New("not a whole number")
	case n < c.min:
		return fmt.Errorf("at least %d", c.min)
	case n > c.max:
		return fmt.Errorf("at most %d", c.max)
	}
	c.n, c.set = n, true
	return nil
}

func (c *Count) String() string { return strconv.FormatInt(c.n, 10) }

// IsSet says whether the command line gave the count, under any of its
// names: a default may then be derived from other flags.
func (c *Count) IsSet() bool { return c.set }

// Int32 is the value; its bounds make it fit.
func (c *Count) Int32() int32 { return int32(c.n) }

// Duration is a time-span flag: Go's 30s, 5m, 1h30m, 250ms, or a bare
// number of seconds as timeout(1) and sleep(1) take it (30, 1.5). Zero is
// zero; a negative span, and a positive one below a millisecond, are
// refused: muster counts time in milliseconds and would round it to zero.
type Duration struct {
	d time.Duration
}

// NewDuration returns a duration flag value of def.
func NewDuration(def time.Duration) *Duration { return &Duration{d: def} }

func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		switch {
		case ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0):
			return errors.New("not a duration: give one such as 30s, 5m or 1h30m, or a number of seconds")
		case math.Abs(secs) > float64(math.MaxInt64)/float64(time.Second):
			return errors.New("too long")
		}
		v = time.Duration(secs * float64(time.Second))
	}
	switch {
	case v < 0:
		return errors.New("negative")
	case v > 0 && v < time.Millisecond:
		return errors.New("below a millisecond, the smallest step muster counts in (give 1ms or more, or 0)")
	}
	d.d = v
	return nil
}

func (d *Duration) String() string { return d.d.String() }

// Value is the duration.
func (d *Duration) Value() time.Duration { return d.d }

// List is a repeatable flag that keeps each value exactly as given: no
// splitting at commas (-x CUDA_VISIBLE_DEVICES=0,1), no trimming of spaces,
// any bytes.
type List struct {
	values []string
}

func (l *List) Set(s string) error {
	l.values = append(l.values, s)
	return nil
}

func (l *List) String() string { return "" }

// Values are the values in the order given.
func (l *List) Values() []string { return l.values }

// NodeRange is a node count flag: N, or MIN:MAX for an elastic job, as
// torchrun's --nnodes. Its bounds make both fit the wire.
type NodeRange struct {
	most, least int64 // least is 0 when the range is a single count
	limit       int64
	set         bool
}

// NewNodeRange returns a node count flag value of def nodes, accepting up to limit.
func NewNodeRange(def, limit int64) *NodeRange { return &NodeRange{most: def, limit: limit} }

func (r *NodeRange) Set(s string) error {
	most, least, err := ParseNodeRange(s, r.limit)
	if err != nil {
		return err
	}
	r.most, r.least, r.set = most, least, true
	return nil
}

func (r *NodeRange) String() string {
	if r.least > 0 {
		return strconv.FormatInt(r.least, 10) + ":" + strconv.FormatInt(r.most, 10)
	}
	return strconv.FormatInt(r.most, 10)
}

// IsSet says whether the command line gave the count.
func (r *NodeRange) IsSet() bool { return r.set }

// Most is N, or MAX of MIN:MAX.
func (r *NodeRange) Most() int32 { return int32(r.most) }

// Least is MIN of MIN:MAX, 0 when a single count was given.
func (r *NodeRange) Least() int32 { return int32(r.least) }

// ParseNodeRange reads N or MIN:MAX with 1 <= MIN <= MAX <= limit; least is
// 0 for N.
func ParseNodeRange(s string, limit int64) (most, least int64, err error) {
	lo, hi, elastic := strings.Cut(s, ":")
	count := func(v string) (int64, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange):
			return 0, fmt.Errorf("%q is not a whole number: want N or MIN:MAX", v)
		case err != nil || n > limit:
			return 0, fmt.Errorf("at most %d", limit)
		case n < 1:
			return 0, errors.New("at least 1")
		}
		return n, nil
	}
	if !elastic {
		most, err = count(s)
		return most, 0, err
	}
	if most, err = count(hi); err != nil {
		return 0, 0, err
	}
	if least, err = count(lo); err != nil {
		return 0, 0, err
	}
	if least > most {
		return 0, 0, fmt.Errorf("MIN:MAX with MIN %d above MAX %d", least, most)
	}
	return most, least, nil
}

// ExitCodes is a comma-separated list of exit codes, 1..255, such as
// --no-restart-exit-codes 93,94; repeating the flag adds to it.
type ExitCodes struct {
	codes []int32
}

func (e *ExitCodes) Set(s string) error {
	codes, err := ParseExitCodes(s)
	if err != nil {
		return err
	}
	e.codes = append(e.codes, codes...)
	return nil
}

func (e *ExitCodes) String() string {
	parts := make([]string, len(e.codes))
	for i, c := range e.codes {
		parts[i] = strconv.Itoa(int(c))
	}
	return strings.Join(parts, ",")
}

// Codes are the codes given, in order.
func (e *ExitCodes) Codes() []int32 { return e.codes }

// ParseExitCodes reads a comma-separated list of exit codes in 1..255.
func ParseExitCodes(s string) ([]int32, error) {
	var codes []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 255 {
			return nil, fmt.Errorf("%q is not an exit code in 1..255", f)
		}
		codes = append(codes, int32(n))
	}
	return codes, nil
}

// Size is a byte-count flag: a whole number of bytes, or one with a suffix
// as ulimit, docker and systemd take them, K, M, G, T (powers of 1024, also
// written KiB, MiB, ...; any case). Zero means none.
type Size struct {
	n int64
}

func (z *Size) Set(s string) error {
	num, mult := s, int64(1)
	units := []struct {
		suffixes []string
		mult     int64
	}{{[]string{"k", "kb", "kib"}, 1 << 10}, {[]string{"m", "mb", "mib"}, 1 << 20}, {[]string{"g", "gb", "gib"}, 1 << 30},
		{[]string{"t", "tb", "tib"}, 1 << 40}, {[]string{"b"}, 1}}
	lower := strings.ToLower(s)
	for _, u := range units {
		for _, suf := range u.suffixes {
			if strings.HasSuffix(lower, suf) && len(suf) > len(s)-len(num) {
				num, mult = s[:len(s)-len(suf)], u.mult
			}
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return errors.New("too large")
	case err != nil || num == "" || num[0] == '+':
		return errors.New("not a size: give bytes, or a number with K, M, G or T (512M, 2G)")
	case n < 0:
		return errors.New("negative")
	case n > math.MaxInt64/mult:
		return errors.New("too large")
	}
	z.n = n * mult
	return nil
}

func (z *Size) String() string {
	if z.n == 0 {
		return "0"
	}
	return strconv.FormatInt(z.n, 10)
}

// Bytes is the size in bytes.
func (z *Size) Bytes() int64 { return z.n }

// Ranks is a set of ranks as mpirun and torchrun take them: 0,2-5,8. Empty
// means every rank.
type Ranks struct {
	spans [][2]int32 // inclusive ranges, as given
	text  string
}

// maxRankSpans bounds a list's length.
const maxRankSpans = 1024

func (r *Ranks) Set(s string) error {
	var spans [][2]int32
	for _, part := range strings.Split(s, ",") {
		if len(spans) == maxRankSpans {
			return fmt.Errorf("more than %d ranges", maxRankSpans)
		}
		lo, hi, isRange := strings.Cut(part, "-")
		if isRange && (lo == "" || hi == "") {
			return fmt.Errorf("%q is neither a rank nor a range: give ranks and ranges such as 0,2-5", part)
		}
		a, err := parseRank(lo)
		if err != nil {
			return err
		}
		b := a
		if isRange {
			if b, err = parseRank(hi); err != nil {
				return err
			}
			if b < a {
				if part == s {
					return errors.New("a range goes from the lower rank to the higher")
				}
				return fmt.Errorf("%s: a range goes from the lower rank to the higher", part)
			}
		}
		spans = append(spans, [2]int32{a, b})
	}
	r.spans, r.text = spans, s
	return nil
}

func parseRank(s string) (int32, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a rank: give ranks and ranges such as 0,2-5", s)
	}
	return int32(n), nil
}

func (r *Ranks) String() string { return r.text }

// Contains says whether rank is in the set; every rank is in an empty one.
func (r *Ranks) Contains(rank int32) bool {
	if len(r.spans) == 0 {
		return true
	}
	for _, sp := range r.spans {
		if rank >= sp[0] && rank <= sp[1] {
			return true
		}
	}
	return false
}

// IsSet says whether a list was given.
func (r *Ranks) IsSet() bool { return len(r.spans) > 0 }

// Spans are the list's ranges, first and last rank both included, as
// given; none for every rank.
func (r *Ranks) Spans() [][2]int32 { return r.spans }

// Below says whether some rank of the list is below n: a list that holds
// none of a job's n ranks selects nothing.
func (r *Ranks) Below(n int64) bool {
	for _, sp := range r.spans {
		if int64(sp[0]) < n {
			return true
		}
	}
	return !r.IsSet()
}

// Choice is a flag whose values another package parses, keeping its
// canonical name: --cpu-bind takes torchrun's names for muster's modes.
// Given twice on the command line (by two of its names, say), the values
// must agree: neither silently wins.
type Choice struct {
	value string
	parse func(string) (string, error)
	given string // the first value the command line gave, "" before one
	// env is the environment variable the flag also reads; its value,
	// applied first, gives way to the command line's.
	env     string
	envRead bool
}

// NewChoice returns a choice flag value of def, parsed by parse.
func NewChoice(def string, parse func(string) (string, error)) *Choice {
	return &Choice{value: def, parse: parse}
}

// ReadsEnv names the environment variable the flag also reads (WithEnv).
func (c *Choice) ReadsEnv(name string) *Choice {
	c.env = name
	return c
}

func (c *Choice) Set(s string) error {
	v, err := c.parse(s)
	if err != nil {
		return err
	}
	if c.given == "" && c.env != "" && !c.envRead && os.Getenv(c.env) == s {
		c.value, c.envRead = v, true
		return nil
	}
	if c.given != "" && v != c.value {
		return fmt.Errorf("%q and %q disagree: give one", c.given, s)
	}
	c.value, c.given = v, s
	return nil
}

func (c *Choice) String() string { return c.value }
