// Package hostfile reads and writes host lists: Open MPI, MPICH/Hydra and
// DeepSpeed hostfiles, mpirun -H lists, and Slurm hostlists.
//
// Every input is bounded (see the limits below) and every host name is
// checked: a name is an IPv4 or IPv6 address, or dot-separated labels of
// letters, digits, '-' and '_' (1 to 63 bytes each, not starting or ending
// with '-'), at most MaxNameLen bytes in all.
package hostfile

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// Limits on what a parser accepts; inputs come from files and the environment.
const (
	MaxLineLen = 4096    // bytes in one hostfile line
	MaxHosts   = 1 << 20 // hosts in one list, also names in one Slurm expansion
	MaxNameLen = 253     // bytes in a host name, as in DNS
	MaxUserLen = 32      // bytes in a user name
	MaxSlots   = 1 << 16 // slots on one host
)

// Host is one node of a host list and the worker slots it offers.
type Host struct {
	Name string
	// Slots is the number of workers the host takes; 0 means not given,
	// which Open MPI reads as the host's number of processor cores.
	Slots int
	// MaxSlots bounds Slots when oversubscribing; 0 means no bound.
	MaxSlots int
	// User is the login name for the host (user@host); empty means the caller's.
	User string
}

// Format names a hostfile dialect.
type Format string

const (
	OpenMPI   Format = "openmpi"
	MPICH     Format = "mpich"
	DeepSpeed Format = "deepspeed"
)

// Formats lists the dialects Emit writes and Parse reads.
func Formats() []Format { return []Format{OpenMPI, MPICH, DeepSpeed} }

// ParseError is an error at one line of a named input.
type ParseError struct {
	Name string // file name, or what the input was
	Line int    // 1-based; 0 when the error is not at a line
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return e.Name + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Msg)
}

// Emit writes hosts in format f. It refuses what f cannot say, rather than
// dropping it: user names in MPICH and DeepSpeed files, hosts without slots
// and repeated hosts in DeepSpeed files, IPv6 addresses in MPICH files.
// MaxSlots is written only by OpenMPI; the other formats have no such bound.
// A host without slots is written bare, which Hydra reads as one process.
func Emit(w io.Writer, f Format, hosts []Host) error {
	var b strings.Builder
	seen := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		if err := checkHost(h); err != nil {
			return fmt.Errorf("hostfile: %w", err)
		}
		switch f {
		case OpenMPI:
			if h.User != "" {
				b.WriteString(h.User + "@")
			}
			b.WriteString(h.Name)
			if h.Slots > 0 {
				b.WriteString(" slots=" + strconv.Itoa(h.Slots))
			}
			if h.MaxSlots > 0 {
				b.WriteString(" max_slots=" + strconv.Itoa(h.MaxSlots))
			}
		case MPICH:
			if h.User != "" {
				return fmt.Errorf("hostfile: mpich hostfiles cannot name a user (host %s)", h.Name)
			}
			if isIPv6(h.Name) {
				return fmt.Errorf("hostfile: mpich hostfiles cannot hold an IPv6 address (%s)", h.Name)
			}
			b.WriteString(h.Name)
			if h.Slots > 0 {
				b.WriteString(":" + strconv.Itoa(h.Slots))
			}
		case DeepSpeed:
			if h.User != "" {
				return fmt.Errorf("hostfile: deepspeed hostfiles cannot name a user (host %s)", h.Name)
			}
			if h.Slots == 0 {
				return fmt.Errorf("hostfile: deepspeed hostfiles need a slot count (host %s)", h.Name)
			}
			if seen[h.Name] {
				return fmt.Errorf("hostfile: deepspeed hostfiles list a host once (%s repeats)", h.Name)
			}
			seen[h.Name] = true
			b.WriteString(h.Name + " slots=" + strconv.Itoa(h.Slots))
		default:
			return fmt.Errorf("hostfile: unknown format %q (want openmpi, mpich or deepspeed)", f)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// checkHost validates a Host built by code rather than parsed, so that Emit
// never writes a line a parser would read differently.
func checkHost(h Host) error {
	if err := checkName(h.Name); err != nil {
		return err
	}
	if h.User != "" {
		if err := checkUser(h.User); err != nil {
			return err
		}
	}
	if h.Slots < 0 || h.Slots > MaxSlots {
		return fmt.Errorf("host %s: slots %d out of range 0..%d", h.Name, h.Slots, MaxSlots)
	}
	if h.MaxSlots < 0 || h.MaxSlots > MaxSlots {
		return fmt.Errorf("host %s: max_slots %d out of range 0..%d", h.Name, h.MaxSlots, MaxSlots)
	}
	if h.MaxSlots > 0 && h.Slots > h.MaxSlots {
		return fmt.Errorf("host %s: slots %d exceed max_slots %d", h.Name, h.Slots, h.MaxSlots)
	}
	return nil
}

// checkName reports whether s is a host name or address this package accepts.
func checkName(s string) error {
	if s == "" {
		return fmt.Errorf("empty host name")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("host name longer than %d bytes (starts %.20q)", MaxNameLen, s)
	}
	if strings.ContainsRune(s, ':') {
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
			return nil
		}
		return fmt.Errorf("invalid host name %q", s)
	}
	for _, label := range strings.Split(s, ".") {
		if !validLabel(label) {
			return fmt.Errorf("invalid host name %q", s)
		}
	}
	return nil
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !isAlnum(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// checkUser accepts POSIX-style login names.
func checkUser(s string) error {
	if s == "" || len(s) > MaxUserLen || s[0] == '-' {
		return fmt.Errorf("invalid user name %q", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("invalid user name %q", s)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isIPv6(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6() && !a.Is4In6()
}

// parseSlots reads a positive slot count no larger than MaxSlots.
func parseSlots(key, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || !allDigits(s) {
		return 0, fmt.Errorf("%s must be a positive integer, got %q", key, s)
	}
	if n > MaxSlots {
		return 0, fmt.Errorf("%s must be at most %d, got %d", key, MaxSlots, n)
	}
	return n, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
