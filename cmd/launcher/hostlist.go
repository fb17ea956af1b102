package main

import "github.com/urfave/cli/v2"

func hostlistCommand() *cli.Command {
	return &cli.Command{Name: "hostlist", Usage: "not yet built"}
}
