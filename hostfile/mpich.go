package hostfile

import (
	"fmt"
	"io"
	"strings"
)

// MPICH (Hydra) hostfile grammar, one host a line:
//
//	host[:N] [# comment]
//
// N is the number of processes for the host; without it Hydra starts one, so
// Slots is 1. Hydra keeps a repeated host as a second block in file order;
// muster keeps one entry per host and adds the slots up. User names and IPv6
// addresses cannot be written in this format.
func parseMPICH(name string, r io.Reader) ([]Host, error) {
	var set hostSet
	err := eachLine(name, r, func(line string, n int) error {
		fail := func(format string, a ...any) error {
			return &ParseError{name, n, fmt.Sprintf(format, a...)}
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			return nil
		}
		if len(f) > 1 {
			return fail("unexpected %q after %s (want host or host:N)", f[1], f[0])
		}
		h, err := parseHostColon(f[0])
		if err != nil {
			return fail("%v", err)
		}
		if old := set.find(h.Name); old != nil {
			err = sumSlots(old, h.Slots)
		} else {
			err = set.add(h)
		}
		if err != nil {
			return fail("%v", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return set.hosts, nil
}

// parseHostColon reads "host" or "host:N", the form of MPICH hostfiles and of
// mpirun -H. A missing N means 1.
func parseHostColon(s string) (Host, error) {
	name, count, hasCount := strings.Cut(s, ":")
	if isIPv6(s) || strings.Contains(count, ":") {
		return Host{}, fmt.Errorf("IPv6 addresses are not supported here (%q)", s)
	}
	if strings.Contains(name, "@") {
		return Host{}, fmt.Errorf("user names are not supported here (%q)", s)
	}
	if err := checkName(name); err != nil {
		return Host{}, err
	}
	h := Host{Name: name, Slots: 1}
	if hasCount {
		n, err := parseSlots("slots", count)
		if err != nil {
			return Host{}, fmt.Errorf("host %s: %w", name, err)
		}
		h.Slots = n
	}
	return h, nil
}
