package cmdline

import (
	"errors"
	"strconv"
	"strings"
)

// Bytes is a size flag: a whole number of bytes, or one with a binary unit
// as journald's and systemd's sizes take it (512K, 100M, 1G, 2T; KiB, MiB,
// GiB and TiB too). Zero means the default its user derives.
type Bytes struct {
	n int64
}

// NewBytes returns a size flag value of def bytes.
func NewBytes(def int64) *Bytes { return &Bytes{n: def} }

var byteUnits = []struct {
	suffix string
	shift  uint
}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}}

func (b *Bytes) Set(s string) error {
	num, shift := s, uint(0)
	trimmed := strings.TrimSuffix(strings.TrimSuffix(s, "B"), "i")
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(trimmed, u.suffix); ok {
			num, shift = rest, u.shift
			break
		}
	}
	if shift == 0 && num != s && num != strings.TrimSuffix(s, "B") {
		return errors.New("not a size: give bytes, or a number with K, M, G or T")
	}
	if shift == 0 {
		num = strings.TrimSuffix(s, "B")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return errors.New("too large")
	case err != nil:
		return errors.New("not a size: give bytes, or a number with K, M, G or T")
	case n < 0:
		return errors.New("negative")
	case n > (1<<63-1)>>shift:
		return errors.New("too large")
	}
	b.n = n << shift
	return nil
}

func (b *Bytes) String() string { return strconv.FormatInt(b.n, 10) }

// Value is the size in bytes.
func (b *Bytes) Value() int64 { return b.n }
