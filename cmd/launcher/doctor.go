package main

import "github.com/urfave/cli/v2"

func doctorCommand() *cli.Command {
	return &cli.Command{Name: "doctor", Usage: "not yet built"}
}
