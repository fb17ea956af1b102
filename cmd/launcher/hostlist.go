package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/musterhq/muster/hostfile"
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
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return errors.New("hostlist expand: give at least one hostlist, e.g. node[01-04]")
					}
					var b strings.Builder
					for _, list := range c.Args().Slice() {
						names, err := hostfile.Expand(list)
						if err != nil {
							return err
						}
						for _, n := range names {
							b.WriteString(n + "\n")
						}
					}
					_, err := fmt.Fprint(c.App.Writer, b.String())
					return err
				},
			},
			{
				Name:      "compress",
				Usage:     "print host names as one hostlist, in the order given",
				ArgsUsage: "NAME...",
				Description: "Names may be given as separate arguments, comma-separated, " +
					"or as hostlists themselves: compress n1 n2,n3 n[4-5] prints n[1-5].",
				Action: func(c *cli.Context) error {
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
					_, err := fmt.Fprintln(c.App.Writer, hostfile.Compress(names))
					return err
				},
			},
		},
	}
}
