package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/hostfile"
	"github.com/musterhq/muster/listing"
	"github.com/urfave/cli/v2"
)

func hostfileCommand() *cli.Command {
	var formats []string
	for _, f := range hostfile.Formats() {
		formats = append(formats, string(f))
	}
	return &cli.Command{
		Name:  "hostfile",
		Usage: "print a hostfile for mpirun, mpiexec (Hydra) or deepspeed",
		Description: "Hosts come from --hostfile (Open MPI, MPICH or DeepSpeed, detected), " +
			"from -H host[:slots],..., or inside a Slurm allocation from SLURM_JOB_NODELIST " +
			"and SLURM_TASKS_PER_NODE.",
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:  "format",
				Value: string(hostfile.OpenMPI),
				Usage: "output `FORMAT`: " + strings.Join(formats, ", "),
			},
			&cli.StringFlag{
				Name:      "hostfile",
				Usage:     "read hosts from `FILE`",
				TakesFile: true,
			},
			&cli.StringFlag{
				Name:    "host",
				Aliases: []string{"H"},
				Usage:   "hosts as a `LIST` of host[:slots], like mpirun -H",
			},
			outputFlag("", "print the hosts as a table, a wide one, or a HostList instead of a hostfile"),
		},
		Action: func(c *cli.Context) error {
			// Bad input is a usage error (exit 2), as under launcher run.
			if c.NArg() > 0 {
				return cmdline.Usagef(c, "unexpected argument %q", c.Args().First())
			}
			out, err := hostsOutput(c)
			if err != nil {
				return err
			}
			format := hostfile.Format(c.String("format"))
			if !validFormat(format) {
				return cmdline.Usagef(c, "--format: unknown format %q (want %s)",
					format, strings.Join(formats, ", "))
			}
			if c.IsSet("hostfile") && c.String("hostfile") == "" {
				return cmdline.Usagef(c, "--hostfile: empty file name")
			}
			if c.IsSet("hostfile") && c.IsSet("host") {
				return cmdline.Usagef(c, "give --hostfile or -H, not both")
			}
			hosts, err := hostfile.Resolve(hostfile.Sources{
				File:   c.String("hostfile"),
				Hosts:  c.String("host"),
				Getenv: os.Getenv,
			})
			if errors.Is(err, hostfile.ErrNoHosts) {
				return cmdline.Usagef(c, "no hosts: give --hostfile or -H, or run inside a Slurm allocation")
			}
			if err != nil {
				return cmdline.Usagef(c, "%s", err)
			}
			if out != "" {
				return listing.WriteHosts(c.App.Writer, out, listing.Hosts(hosts))
			}
			var b strings.Builder
			if err := hostfile.Emit(&b, format, hosts); err != nil {
				return err
			}
			_, err = fmt.Fprint(c.App.Writer, b.String())
			return err
		},
	}
}

// hostsOutput is -o of the hostfile and hostlist commands: "" (not given)
// prints their own text.
func hostsOutput(c *cli.Context) (listing.Format, error) {
	if c.String("output") == "" {
		return "", nil
	}
	return outputFormat(c)
}

func validFormat(f hostfile.Format) bool {
	for _, g := range hostfile.Formats() {
		if f == g {
			return true
		}
	}
	return false
}
