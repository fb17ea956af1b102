package hostfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// eachLine calls fn with every line of r, line ending removed, and its
// 1-based number. Lines longer than MaxLineLen and text that is not UTF-8
// are errors naming the line.
func eachLine(name string, r io.Reader, fn func(line string, n int) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), MaxLineLen+1)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSuffix(sc.Text(), "\r")
		if !utf8.ValidString(line) {
			return &ParseError{name, n, "line is not valid UTF-8"}
		}
		if err := fn(line, n); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &ParseError{name, n + 1, fmt.Sprintf("line longer than %d bytes", MaxLineLen)}
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// hostSet keeps hosts in first-seen order with one entry per name.
type hostSet struct {
	hosts []Host
	index map[string]int
}

// find returns the entry for name, or nil.
func (s *hostSet) find(name string) *Host {
	if i, ok := s.index[name]; ok {
		return &s.hosts[i]
	}
	return nil
}

// add appends a host not yet in the set.
func (s *hostSet) add(h Host) error {
	if len(s.hosts) >= MaxHosts {
		return fmt.Errorf("more than %d hosts", MaxHosts)
	}
	if s.index == nil {
		s.index = make(map[string]int)
	}
	s.index[h.Name] = len(s.hosts)
	s.hosts = append(s.hosts, h)
	return nil
}

// sumSlots adds n slots to a host, within MaxSlots.
func sumSlots(h *Host, n int) error {
	if h.Slots+n > MaxSlots {
		return fmt.Errorf("host %s: slots add up to more than %d", h.Name, MaxSlots)
	}
	h.Slots += n
	return nil
}
