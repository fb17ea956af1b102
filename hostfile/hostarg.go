package hostfile

import (
	"fmt"
	"strings"
)

// MaxArgLen bounds a host list given on the command line or in the environment.
const MaxArgLen = 1 << 20

// ParseHostArg reads an mpirun -H list: "a,b:2,c:3". A host without :N gets
// one slot; a host named again adds its slots up, as Open MPI documents for
// --host.
func ParseHostArg(s string) ([]Host, error) {
	if len(s) > MaxArgLen {
		return nil, fmt.Errorf("host list longer than %d bytes", MaxArgLen)
	}
	var set hostSet
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("empty entry in host list %q", s)
		}
		h, err := parseHostColon(item)
		if err != nil {
			return nil, err
		}
		if old := set.find(h.Name); old != nil {
			err = sumSlots(old, h.Slots)
		} else {
			err = set.add(h)
		}
		if err != nil {
			return nil, err
		}
	}
	return set.hosts, nil
}
