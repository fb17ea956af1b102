package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/launch"
	"github.com/musterhq/muster/storeclient"
)

// attachCommand follows a running job again, as its launcher did.
func attachCommand() *cli.Command {
	from := cmdline.NewCount(1, 1, 1<<31-1)
	return &cli.Command{
		Name:  "attach",
		Usage: "follow a running job again: print its output, stop it on Ctrl-C, end with its exit code (needs --cluster)",
		Description: "For a job whose launcher is gone (its terminal closed, its machine rebooted, or the store moved where it could not follow). " +
			"Output comes from event --from on: 1, the default, is all the store still holds of it.",
		ArgsUsage: "JOB",
		Flags: append(clusterFlags(true),
			cmdline.Flag(from, "from", nil, "print the job's events from version `N` on"),
			&cli.BoolFlag{Name: "no-tag-output", Usage: "print output lines without the [RANK] prefix"},
		),
		Action: clusterActionWithin(0, func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error {
			if c.NArg() != 1 {
				return cmdline.Usagef(c, "name one job (launcher jobs lists them)")
			}
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer signal.Stop(sigs)
			log, err := newLogger(false)
			if err != nil {
				return err
			}
			code, err := launch.Attach(ctx, log, cl, c.Args().First(), uint64(from.Int32()), launch.Options{
				Stdout: os.Stdout, Stderr: os.Stderr, TagOutput: !c.Bool("no-tag-output"), Signals: sigs,
				Store: c.String("cluster"), Liveness: 2 * time.Second, Reattach: 10 * time.Minute,
			})
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			if code != 0 {
				return cli.Exit("", code)
			}
			return nil
		}),
	}
}
