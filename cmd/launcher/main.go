// Command launcher submits jobs to muster and runs the embedded default.
package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/engine"
	"github.com/musterhq/muster/ncclprobe"
	"github.com/musterhq/muster/openmpi"
)

func main() {
	// An Open MPI job's workers, and mpirun's remote shell, are this binary.
	openmpi.RunIfRequested()
	ncclprobe.RunIfRequested(engine.LibraryNCCLVersion)
	app := &cli.App{
		Name:  "launcher",
		Usage: "start distributed GPU jobs",
		Commands: []*cli.Command{
			cmdline.RunsCommand(runCommand()),
			benchCommand(),
			hostlistCommand(),
			hostfileCommand(),
			doctorCommand(),
			nodesCommand(),
			storesCommand(),
			jobsCommand(),
			cancelCommand(),
			logsCommand(),
			attachCommand(),
			certsCommand(),
			cmdline.CompletionCommand(),
		},
	}
	os.Exit(cmdline.Run(app, os.Args))
}
