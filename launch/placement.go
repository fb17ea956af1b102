package launch

import (
	"fmt"
	"strings"

	"github.com/musterhq/muster/hostfile"
	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Placement chooses a cluster job's nodes, as mpirun's -H, --hostfile and
// --exclude do. A flag counts as given when its *Set is true, even empty.
type Placement struct {
	Hosts, Hostfile, Exclude          string
	HostsSet, HostfileSet, ExcludeSet bool
	// NNodesSet says -n was given: the hosts do not set the number of nodes.
	NNodesSet bool
	// WorkersSet says --nproc or --gpus was given: the hosts' slots do not
	// set the workers per node.
	WorkersSet bool
}

// Apply puts the placement in spec. The hosts give the number of nodes
// unless -n does, and their slots the workers per node unless --nproc or
// --gpus do. Its errors are UsageErrors naming the flag.
func (p Placement) Apply(spec *musterv1.JobSpec) error {
	if p.ExcludeSet {
		for _, name := range strings.Split(p.Exclude, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				return usagef("--exclude: empty entry in %q", p.Exclude)
			}
			spec.Exclude = append(spec.Exclude, name)
		}
	}
	var hosts []hostfile.Host
	var from string // where the hosts come from, as errors name it
	var err error
	switch {
	case p.HostsSet && p.HostfileSet:
		return usagef("-H and --hostfile: give one")
	case p.HostfileSet:
		from = "--hostfile " + p.Hostfile
		if p.Hostfile == "" {
			return usagef("--hostfile: empty file name")
		}
		if hosts, err = hostfile.Resolve(hostfile.Sources{File: p.Hostfile}); err != nil {
			return usagef("--hostfile: %v", err)
		}
	case p.HostsSet:
		from = "-H"
		if strings.TrimSpace(p.Hosts) == "" {
			return usagef("-H: empty host list")
		}
		if hosts, err = hostfile.Resolve(hostfile.Sources{Hosts: p.Hosts}); err != nil {
			return usagef("%v", err) // already "-H: ..."
		}
	default:
		return nil
	}
	for _, h := range hosts {
		for _, x := range spec.Exclude {
			if x == h.Name {
				return usagef("%s lists %s, which --exclude removes", from, h.Name)
			}
		}
		spec.Hosts = append(spec.Hosts, h.Name)
	}
	if !p.NNodesSet {
		spec.Nnodes = int32(len(hosts))
	} else if int(spec.Nnodes) > len(hosts) {
		return usagef("--nnodes %d is more than the %d hosts %s lists", spec.Nnodes, len(hosts), from)
	}
	if p.WorkersSet {
		return nil // the slots are ignored
	}
	// A node runs nproc workers, the same on every node: the slots set it
	// only when all hosts agree.
	first := hosts[0]
	for _, h := range hosts[1:] {
		if h.Slots != first.Slots {
			return usagef("muster runs the same number of workers on every node, but %s gives %s and %s: "+
				"give every host the same slots, or --nproc", from, slotsText(first, from), slotsText(h, from))
		}
	}
	if first.Slots > jobspec.MaxNProc {
		return usagef("%s gives %s, more workers per node than %d", from, slotsText(first, from), jobspec.MaxNProc)
	}
	spec.Nproc = int32(first.Slots) // 0 when no host gives slots: the usual default
	return nil
}

// slotsText is a host's slots as its source writes them.
func slotsText(h hostfile.Host, from string) string {
	switch {
	case from == "-H":
		return fmt.Sprintf("%s:%d", h.Name, h.Slots)
	case h.Slots == 0:
		return h.Name + " without slots"
	}
	return fmt.Sprintf("%s slots=%d", h.Name, h.Slots)
}
