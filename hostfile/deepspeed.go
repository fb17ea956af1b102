package hostfile

import (
	"fmt"
	"io"
	"strings"
)

// DeepSpeed hostfile grammar, one host a line:
//
//	host slots=N
//
// Lines starting with '#' and blank lines are skipped, as DeepSpeed does; a
// '#' after the slots starts a comment. DeepSpeed refuses a repeated host, and
// so does muster. N must be positive.
func parseDeepSpeed(name string, r io.Reader) ([]Host, error) {
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
		if len(f) != 2 || !strings.HasPrefix(f[1], "slots=") {
			return fail("want \"host slots=N\", got %q", strings.TrimSpace(line))
		}
		if err := checkName(f[0]); err != nil {
			return fail("%v", err)
		}
		slots, err := parseSlots("slots", strings.TrimPrefix(f[1], "slots="))
		if err != nil {
			return fail("%v", err)
		}
		if set.find(f[0]) != nil {
			return fail("host %s is listed twice; a DeepSpeed hostfile lists each host once", f[0])
		}
		if err := set.add(Host{Name: f[0], Slots: slots}); err != nil {
			return fail("%v", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return set.hosts, nil
}
