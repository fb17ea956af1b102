package main

import "github.com/urfave/cli/v2"

func hostfileCommand() *cli.Command {
	return &cli.Command{Name: "hostfile", Usage: "not yet built"}
}
