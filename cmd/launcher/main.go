// Command launcher submits jobs to muster and runs the embedded default.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/supervise"
)

func main() {
	// A job's shim is this binary started again: it must not run main.
	supervise.RunShimIfRequested()
	app := &cli.App{
		Name:  "launcher",
		Usage: "start distributed GPU jobs",
		// main prints errors and exits with their codes.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			runCommand(),
			benchCommand(),
			hostlistCommand(),
			hostfileCommand(),
			doctorCommand(),
			nodesCommand(),
			jobsCommand(),
			cancelCommand(),
			certsCommand(),
		},
	}
	if err := app.Run(os.Args); err != nil {
		code := 1
		if ec, ok := err.(cli.ExitCoder); ok {
			code = ec.ExitCode()
		}
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "launcher:", msg)
		}
		os.Exit(code)
	}
}
