package main

import (
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/musterhq/muster/engine/bench"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure an NCCL collective from inside a job, printing nccl-tests' table",
		ArgsUsage: "COLLECTIVE [-b MIN] [-e MAX] [-f FACTOR | -i STEP] [-n ITERS] [-w WARMUP] [-c CHECK] [-d TYPE] [-o OP] [-r ROOT]",
		Description: "COLLECTIVE is one of " + strings.Join(bench.CollectiveNames(), ", ") + ".\n" +
			"Run it as the workers of a job, e.g.\n" +
			"   launcher run --gpus 2 -- launcher bench allreduce -b 8 -e 4G -f 2\n" +
			"`launcher bench -h` lists the flags (nccl-tests' names and defaults).",
		// nccl-tests' flags follow the collective, which urfave/cli would
		// take as the end of the flags; bench parses its own.
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			opts, err := bench.ParseArgs(c.Args().Slice(), os.Stderr)
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			if err != nil {
				return cli.Exit("bench: "+err.Error(), 2)
			}
			log, err := zap.NewProduction()
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			return bench.Main(c.Context, log, os.Stdout, opts)
		},
	}
}
