package hostfile

import (
	"fmt"
	"io"
	"strings"
)

// Open MPI hostfile grammar, as mpirun reads it:
//
//	[user@]host [key=value ...]
//
// Keys: slots, cpu, count give the slot count; max_slots, max-slots,
// slots_max, slots-max and the cpu/count spellings of both give the maximum;
// username, user_name, user-name give the user. Spaces may surround '='.
// Comments run from '#' or '//' to the end of the line; '/* ... */' may span
// lines and, as in Open MPI, ends the host line it appears on.
//
// Slots: a host listed once without slots has Slots 0, which Open MPI
// documents as "the number of processor cores on that host"; only the node
// itself knows that number. A host listed again adds its slots up, a line
// without slots counting 1 (so "a\na\n" gives a 2 slots); this is Open MPI's
// rule for repeated hosts. A line with max_slots but no slots gets
// slots=max_slots, and slots may never exceed max_slots.
//
// Refused, where Open MPI would go on: unknown keys, words without a key,
// '^host' exclusions and '+n1' relative hosts (they only filter another
// allocation), port=, and an unterminated '/*'.

// keyKind sorts an Open MPI hostfile keyword into what it sets.
func keyKind(key string) string {
	switch key {
	case "slots", "cpu", "count":
		return "slots"
	case "max_slots", "max-slots", "slots_max", "slots-max",
		"max_cpu", "max-cpu", "cpu_max", "cpu-max",
		"max_count", "max-count", "count_max", "count-max":
		return "max_slots"
	case "username", "user_name", "user-name":
		return "user"
	case "boards", "sockets", "sockets_per_board", "sockets-per-board",
		"cores", "cores_per_socket", "cores-per-socket":
		// Topology is what muster learns from the node itself.
		return "ignored"
	case "port":
		return "port"
	}
	return ""
}

// parseOpenMPI reads an Open MPI hostfile.
func parseOpenMPI(name string, r io.Reader) ([]Host, error) {
	var set hostSet
	inComment := false
	commentLine := 0
	err := eachLine(name, r, func(line string, n int) error {
		rest := line
		for {
			if inComment {
				i := strings.Index(rest, "*/")
				if i < 0 {
					return nil
				}
				rest, inComment = rest[i+2:], false
				continue
			}
			i, kind := commentStart(rest)
			if i < 0 {
				return openMPILine(&set, name, n, rest)
			}
			if err := openMPILine(&set, name, n, rest[:i]); err != nil {
				return err
			}
			if kind != "/*" {
				return nil
			}
			rest, inComment, commentLine = rest[i+2:], true, n
		}
	})
	if err != nil {
		return nil, err
	}
	if inComment {
		return nil, &ParseError{name, commentLine, "unterminated /* comment"}
	}
	return set.hosts, nil
}

// commentStart finds the first '#', '//' or '/*' in s.
func commentStart(s string) (int, string) {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '#':
			return i, "#"
		case strings.HasPrefix(s[i:], "//"):
			return i, "//"
		case strings.HasPrefix(s[i:], "/*"):
			return i, "/*"
		}
	}
	return -1, ""
}

// openMPILine parses one host line, comments already removed, into set.
func openMPILine(set *hostSet, name string, n int, text string) error {
	fail := func(format string, a ...any) error {
		return &ParseError{name, n, fmt.Sprintf(format, a...)}
	}
	tok := strings.Fields(strings.ReplaceAll(text, "=", " = "))
	if len(tok) == 0 {
		return nil
	}
	if len(tok) > 1 && tok[1] == "=" {
		return fail("line starts with %q, not a host name", tok[0])
	}
	user, host, err := splitUserHost(tok[0])
	if err != nil {
		return fail("%v", err)
	}
	var slots, maxSlots int
	for i := 1; i < len(tok); i += 3 {
		key := tok[i]
		if key == "=" {
			return fail("unexpected '=' after host %s", host)
		}
		if i+1 >= len(tok) || tok[i+1] != "=" {
			return fail("unexpected %q after host %s (want key=value)", key, host)
		}
		if i+2 >= len(tok) || tok[i+2] == "=" {
			return fail("%s= needs a value", key)
		}
		val := tok[i+2]
		switch keyKind(key) {
		case "slots":
			if slots != 0 {
				return fail("slots given twice for host %s", host)
			}
			if slots, err = parseSlots("slots", val); err != nil {
				return fail("%v", err)
			}
		case "max_slots":
			if maxSlots != 0 {
				return fail("max_slots given twice for host %s", host)
			}
			if maxSlots, err = parseSlots("max_slots", val); err != nil {
				return fail("%v", err)
			}
		case "user":
			if user != "" && user != val {
				return fail("host %s names two users, %q and %q", host, user, val)
			}
			if err := checkUser(val); err != nil {
				return fail("%v", err)
			}
			user = val
		case "ignored":
			if !allDigits(val) || len(val) > 9 {
				return fail("%s must be a non-negative integer, got %q", key, val)
			}
		case "port":
			return fail("port= is not supported")
		default:
			return fail("unknown keyword %q", key)
		}
	}
	if maxSlots > 0 && slots > maxSlots {
		return fail("slots=%d exceed max_slots=%d for host %s", slots, maxSlots, host)
	}
	if err := mergeOpenMPI(set, Host{Name: host, Slots: slots, MaxSlots: maxSlots, User: user}); err != nil {
		return fail("%v", err)
	}
	return nil
}

// mergeOpenMPI adds one line's host to set by Open MPI's rules (see top).
func mergeOpenMPI(set *hostSet, h Host) error {
	old := set.find(h.Name)
	if old == nil {
		if h.Slots == 0 {
			h.Slots = h.MaxSlots
		}
		return set.add(h)
	}
	if old.User != h.User {
		return fmt.Errorf("host %s listed again with user %q, was %q", h.Name, h.User, old.User)
	}
	if h.MaxSlots > 0 {
		if old.MaxSlots > 0 && old.MaxSlots != h.MaxSlots {
			return fmt.Errorf("host %s listed again with max_slots=%d, was %d", h.Name, h.MaxSlots, old.MaxSlots)
		}
		old.MaxSlots = h.MaxSlots
	}
	if old.Slots == 0 {
		old.Slots = 1
	}
	add := h.Slots
	if add == 0 {
		add = 1
	}
	if err := sumSlots(old, add); err != nil {
		return err
	}
	if old.MaxSlots > 0 && old.Slots > old.MaxSlots {
		return fmt.Errorf("host %s: slots add up to %d, more than max_slots=%d", h.Name, old.Slots, old.MaxSlots)
	}
	return nil
}

// splitUserHost splits "user@host" and checks both parts.
func splitUserHost(s string) (user, host string, err error) {
	switch {
	case strings.HasPrefix(s, "^"):
		return "", "", fmt.Errorf("excluded hosts (%q) are not supported", s)
	case strings.HasPrefix(s, "+"):
		return "", "", fmt.Errorf("relative hosts (%q) are not supported", s)
	}
	host = s
	if i := strings.IndexByte(s, '@'); i >= 0 {
		user, host = s[:i], s[i+1:]
		if err := checkUser(user); err != nil {
			return "", "", err
		}
	}
	if err := checkName(host); err != nil {
		return "", "", err
	}
	return user, host, nil
}
