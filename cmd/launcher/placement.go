package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/hostfile"
	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// placementFlags choose a cluster job's nodes, as mpirun's do.
func placementFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "host", Aliases: []string{"H"}, Usage: "run on these nodes, by name or address, in node rank order: " +
			"a `LIST` of host[:slots] as for mpirun -H (-n defaults to their number)"},
		&cli.StringFlag{Name: "hostfile", TakesFile: true, Usage: "as -H, from an Open MPI, MPICH or DeepSpeed hostfile `FILE`"},
		&cli.StringFlag{Name: "exclude", Usage: "never run on these nodes: a comma-separated `LIST` of names or addresses"},
	}
}

// applyPlacement puts -H or --hostfile and --exclude in spec. The hosts give
// the number of nodes unless -n does, and their slots the workers per node
// unless --nproc or --gpus do.
func applyPlacement(c *cli.Context, f runFlags, spec *musterv1.JobSpec) error {
	if c.IsSet("exclude") {
		for _, name := range strings.Split(c.String("exclude"), ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				return cmdline.Usagef(c, "--exclude: empty entry in %q", c.String("exclude"))
			}
			spec.Exclude = append(spec.Exclude, name)
		}
	}
	var hosts []hostfile.Host
	var from string // where the hosts come from, as errors name it
	var err error
	switch {
	case c.IsSet("host") && c.IsSet("hostfile"):
		return cmdline.Usagef(c, "-H and --hostfile: give one")
	case c.IsSet("hostfile"):
		from = "--hostfile " + c.String("hostfile")
		if c.String("hostfile") == "" {
			return cmdline.Usagef(c, "--hostfile: empty file name")
		}
		if hosts, err = hostfile.Resolve(hostfile.Sources{File: c.String("hostfile")}); err != nil {
			return cmdline.Usagef(c, "--hostfile: %v", err)
		}
	case c.IsSet("host"):
		from = "-H"
		if strings.TrimSpace(c.String("host")) == "" {
			return cmdline.Usagef(c, "-H: empty host list")
		}
		if hosts, err = hostfile.Resolve(hostfile.Sources{Hosts: c.String("host")}); err != nil {
			return cmdline.Usagef(c, "%v", err) // already "-H: ..."
		}
	default:
		return nil
	}
	for _, h := range hosts {
		for _, x := range spec.Exclude {
			if x == h.Name {
				return cmdline.Usagef(c, "%s lists %s, which --exclude removes", from, h.Name)
			}
		}
		spec.Hosts = append(spec.Hosts, h.Name)
	}
	if !f.nnodes.IsSet() {
		spec.Nnodes = int32(len(hosts))
	} else if int(spec.Nnodes) > len(hosts) {
		return cmdline.Usagef(c, "--nnodes %d is more than the %d hosts %s lists", spec.Nnodes, len(hosts), from)
	}
	if f.nproc.IsSet() || f.gpus.IsSet() {
		return nil // the slots are ignored
	}
	// A node runs nproc workers, the same on every node: the slots set it
	// only when all hosts agree.
	first := hosts[0]
	for _, h := range hosts[1:] {
		if h.Slots != first.Slots {
			return cmdline.Usagef(c, "muster runs the same number of workers on every node, but %s gives %s and %s: "+
				"give every host the same slots, or --nproc", from, slotsText(first, from), slotsText(h, from))
		}
	}
	if first.Slots > jobspec.MaxNProc {
		return cmdline.Usagef(c, "%s gives %s, more workers per node than %d", from, slotsText(first, from), jobspec.MaxNProc)
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
