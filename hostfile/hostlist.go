package hostfile

import (
	"fmt"
	"strconv"
	"strings"
)

// Slurm hostlist grammar (scontrol show hostnames / show hostlist):
//
//	list  = item { ("," | space) item }      commas inside brackets do not split
//	item  = text { "[" ranges "]" text }     several groups: a cartesian product
//	ranges = range { "," range }
//	range = digits [ "-" digits ]            lo <= hi
//
// A range pads its numbers with zeros to the length of lo, as Slurm does:
// node[001-003] gives node001 node002 node003, n[9-10] gives n9 n10.
// Nested brackets, a missing or extra bracket, lo > hi and expansions of more
// than MaxHosts names are errors; so is any name that is not a valid host name.

// maxDigits keeps range bounds well inside uint64.
const maxDigits = 18

// Expand returns the host names a Slurm hostlist stands for, in order, with
// the leftmost bracket group varying slowest: rack[1-2]-n[1-2] gives rack1-n1
// rack1-n2 rack2-n1 rack2-n2.
func Expand(list string) ([]string, error) {
	if len(list) > MaxArgLen {
		return nil, fmt.Errorf("hostlist longer than %d bytes", MaxArgLen)
	}
	items, err := splitHostlist(list)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, item := range items {
		if out, err = expandItem(item, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// splitHostlist splits at commas and spaces outside brackets and checks that
// brackets pair up without nesting.
func splitHostlist(list string) ([]string, error) {
	var items []string
	open, start := -1, 0
	for i := 0; i < len(list); i++ {
		c := list[i]
		switch {
		case c == '[':
			if open >= 0 {
				return nil, fmt.Errorf("hostlist %.60q: nested '[' at byte %d", list, i)
			}
			open = i
		case c == ']':
			if open < 0 {
				return nil, fmt.Errorf("hostlist %.60q: ']' without '[' at byte %d", list, i)
			}
			open = -1
		case open < 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n'):
			if i > start {
				items = append(items, list[start:i])
			}
			start = i + 1
		}
	}
	if open >= 0 {
		return nil, fmt.Errorf("hostlist %.60q: missing ']' for '[' at byte %d", list, open)
	}
	if start < len(list) {
		items = append(items, list[start:])
	}
	return items, nil
}

// numRange is lo..hi, each number written with at least width digits.
type numRange struct {
	lo, hi uint64
	width  int
}

// segment is literal text, or a bracket group when ranges is set.
type segment struct {
	text   string
	ranges []numRange
}

// expandItem appends the names of one item (brackets already checked) to out.
func expandItem(item string, out []string) ([]string, error) {
	var segs []segment
	count := 1
	for rest := item; rest != ""; {
		i := strings.IndexByte(rest, '[')
		if i < 0 {
			segs = append(segs, segment{text: rest})
			break
		}
		if i > 0 {
			segs = append(segs, segment{text: rest[:i]})
		}
		j := strings.IndexByte(rest, ']')
		ranges, n, err := parseRanges(rest[i+1 : j])
		if err != nil {
			return nil, fmt.Errorf("hostlist %.60q: %w", item, err)
		}
		if count > (MaxHosts-len(out))/n {
			return nil, fmt.Errorf("hostlist %.60q expands to more than %d names", item, MaxHosts)
		}
		count *= n
		segs = append(segs, segment{ranges: ranges})
		rest = rest[j+1:]
	}
	if count > MaxHosts-len(out) {
		return nil, fmt.Errorf("hostlist %.60q expands to more than %d names", item, MaxHosts)
	}
	var err error
	var walk func(k int, name string)
	walk = func(k int, name string) {
		if err != nil {
			return
		}
		if k == len(segs) {
			if e := checkName(name); e != nil {
				err = fmt.Errorf("hostlist %.60q: %w", item, e)
				return
			}
			out = append(out, name)
			return
		}
		s := segs[k]
		if s.ranges == nil {
			walk(k+1, name+s.text)
			return
		}
		for _, r := range s.ranges {
			for v := r.lo; v <= r.hi && err == nil; v++ {
				walk(k+1, name+padNumber(v, r.width))
			}
		}
	}
	walk(0, "")
	return out, err
}

// parseRanges reads "1-3,7,10-11" and returns the ranges and how many
// numbers they hold (at most MaxHosts).
func parseRanges(s string) ([]numRange, int, error) {
	if s == "" {
		return nil, 0, fmt.Errorf("empty brackets")
	}
	var ranges []numRange
	total := 0
	for _, part := range strings.Split(s, ",") {
		loText, hiText, isRange := strings.Cut(part, "-")
		if !isRange {
			hiText = loText
		}
		lo, err := parseBound(loText, part)
		if err != nil {
			return nil, 0, err
		}
		hi, err := parseBound(hiText, part)
		if err != nil {
			return nil, 0, err
		}
		if lo > hi {
			return nil, 0, fmt.Errorf("range %q runs backwards (%d > %d)", part, lo, hi)
		}
		if hi-lo >= uint64(MaxHosts-total) {
			return nil, 0, fmt.Errorf("brackets [%.40s] hold more than %d numbers", s, MaxHosts)
		}
		total += int(hi-lo) + 1
		ranges = append(ranges, numRange{lo, hi, len(loText)})
	}
	return ranges, total, nil
}

func parseBound(s, part string) (uint64, error) {
	if !allDigits(s) {
		return 0, fmt.Errorf("range %q: want digits, got %q", part, s)
	}
	if len(s) > maxDigits {
		return 0, fmt.Errorf("range %q: number longer than %d digits", part, maxDigits)
	}
	return strconv.ParseUint(s, 10, 64)
}

// padNumber writes v with at least width digits.
func padNumber(v uint64, width int) string {
	s := strconv.FormatUint(v, 10)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}

// Compress writes names as a Slurm hostlist, the inverse of Expand:
// Expand(Compress(names)) gives names back, order and repeats included.
// Like Slurm it keeps the given order (sort first for the shortest form),
// joins neighbours that share the text around their last number into one
// bracket group, and joins consecutive numbers of one zero-padding width into
// a range: n1,n2,n3,n5 gives n[1-3,5]; n09,n10 gives n[09-10]. Names must be
// valid host names; any other string is written as it is.
func Compress(names []string) string {
	var b strings.Builder
	for i := 0; i < len(names); {
		prefix, _, suffix, ok := splitNumber(names[i])
		j := i + 1
		for ok && j < len(names) {
			p, _, s, ok2 := splitNumber(names[j])
			if !ok2 || p != prefix || s != suffix {
				break
			}
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i+1 {
			b.WriteString(names[i])
			i = j
			continue
		}
		b.WriteString(prefix + "[")
		for k := i; k < j; {
			_, first, _, _ := splitNumber(names[k])
			last := first
			v, _ := strconv.ParseUint(first, 10, 64)
			m := k + 1
			for ; m < j; m++ {
				_, d, _, _ := splitNumber(names[m])
				if d != padNumber(v+1, len(first)) {
					break
				}
				v, last = v+1, d
			}
			if k > i {
				b.WriteByte(',')
			}
			b.WriteString(first)
			if m > k+1 {
				b.WriteString("-" + last)
			}
			k = m
		}
		b.WriteString("]" + suffix)
		i = j
	}
	return b.String()
}

// splitNumber cuts a name around its last run of digits; ok is false when it
// has none, or one too long to count with.
func splitNumber(name string) (prefix, digits, suffix string, ok bool) {
	end := len(name)
	for end > 0 && !isDigit(name[end-1]) {
		end--
	}
	start := end
	for start > 0 && isDigit(name[start-1]) {
		start--
	}
	if start == end || end-start > maxDigits {
		return "", "", "", false
	}
	return name[:start], name[start:end], name[end:], true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
