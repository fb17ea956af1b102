package main

import (
	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/launch"
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

// placement is what -H or --hostfile and --exclude ask (launch.Placement).
func placement(c *cli.Context, f runFlags) launch.Placement {
	return launch.Placement{
		Hosts: c.String("host"), Hostfile: c.String("hostfile"), Exclude: c.String("exclude"),
		HostsSet: c.IsSet("host"), HostfileSet: c.IsSet("hostfile"), ExcludeSet: c.IsSet("exclude"),
		NNodesSet: f.nnodes.IsSet(), WorkersSet: f.nproc.IsSet() || f.gpus.IsSet(),
	}
}
