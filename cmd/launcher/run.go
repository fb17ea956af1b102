package main

import "github.com/urfave/cli/v2"

func runCommand() *cli.Command {
	return &cli.Command{Name: "run", Usage: "not yet built"}
}
