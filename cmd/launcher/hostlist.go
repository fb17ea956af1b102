package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/musterhq/muster/hostfile"
	"github.com/musterhq/muster/listing"
	"github.com/urfave/cli/v2"
)

func hostlistCommand() *cli.Command {
	return &cli.Command{
		Name:  "hostlist",
		Usage: "expand or compress Slurm hostlists",
		Subcommands: []*cli.Command{
			{
				Name:      "expand",
				Usage:     "print the host names of hostlists, one a line",
				ArgsUsage: "LIST...",
				Flags:     []cli.Flag{outputFlag("", "print the names as a table, a wide one, or a HostList instead of one a line")},
				Action: func(c *cli.Context) error {
					out, err := hostsOutput(c)
					if err != nil {
						return err
					}
					if c.NArg() == 0 {
						return errors.New("hostlist expand: give at least one hostlist, e.g. node[01-04]")
					}
					var all []string
					var b strings.Builder
					for _, list := range c.Args().Slice() {
						names, err := hostfile.Expand(list)
						if err != nil {
							return err
						}
						if len(all)+len(names) > hostfile.MaxHosts {
							return fmt.Errorf("more than %d names", hostfile.MaxHosts)
						}
						all = append(all, names...)
						for _, n := range names {
							b.WriteString(n + "\n")
						}
					}
					if out != "" {
						return listing.WriteHosts(c.App.Writer, out, listing.HostNames(all))
					}
					_, err = fmt.Fprint(c.App.Writer, b.String())
					return err
				},
			},
			{
				Name:      "compress",
				Usage:     "print host names as one hostlist, in the order given",
				ArgsUsage: "NAME...",
				Description: "Names may be given as separate arguments, comma-separated, " +
					"or as hostlists themselves: compress n1 n2,n3 n[4-5] prints n[1-5].",
				Flags: []cli.Flag{outputFlag("", "print a Hostlist object, with its count, instead of the hostlist alone (table and wide print HOSTLIST COUNT)")},
				Action: func(c *cli.Context) error {
					out, err := hostsOutput(c)
					if err != nil {
						return err
					}
					if c.NArg() == 0 {
						return errors.New("hostlist compress: give at least one host name")
					}
					var names []string
					for _, arg := range c.Args().Slice() {
						more, err := hostfile.Expand(arg)
						if err != nil {
							return err
						}
						if len(names)+len(more) > hostfile.MaxHosts {
							return fmt.Errorf("more than %d names", hostfile.MaxHosts)
						}
						names = append(names, more...)
					}
					if out != "" {
						return listing.WriteHostlist(c.App.Writer, out, listing.Hostlist{APIVersion: listing.APIVersion,
							Kind: "Hostlist", Hostlist: hostfile.Compress(names), Count: len(names)})
					}
					_, err = fmt.Fprintln(c.App.Writer, hostfile.Compress(names))
					return err
				},
			},
		},
	}
}
