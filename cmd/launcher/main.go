// Command launcher submits jobs to muster and runs the embedded default.
package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/openmpi"
	"github.com/musterhq/muster/supervise"
)

func main() {
	// A job's shim is this binary started again: it must not run main.
	supervise.RunShimIfRequested()
	// An Open MPI job's workers, and mpirun's remote shell, are this binary.
	openmpi.RunIfRequested()
	app := &cli.App{
		Name:  "launcher",
		Usage: "start distributed GPU jobs",
		Commands: []*cli.Command{
			runCommand(),
			benchCommand(),
			hostlistCommand(),
			hostfileCommand(),
			doctorCommand(),
			nodesCommand(),
			jobsCommand(),
			cancelCommand(),
			logsCommand(),
			certsCommand(),
		},
	}
	os.Exit(cmdline.Run(app, os.Args))
}
