package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/jobspec"
	"github.com/musterhq/muster/launch"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

func logsCommand() *cli.Command {
	rank := cmdline.NewCount(-1, 0, jobspec.MaxNodes*jobspec.MaxNProc-1)
	tail := cmdline.NewCount(-1, 0, 1<<31-1)
	return &cli.Command{
		Name:  "logs",
		Usage: "print a job's output as its nodes kept it: stdout to stdout, stderr to stderr (needs --cluster)",
		Description: "Asks the store given by --cluster HOST:PORT (or MUSTER_CLUSTER), which relays each node's kept output of the job's ranks " +
			"(agent --rank-logs). Only the job's user and the cluster operator may read it.",
		ArgsUsage: "JOB",
		Flags: append(clusterFlags(true),
			cmdline.Flag(rank, "rank", nil, "only rank `N`'s output, untagged"),
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "go on printing a running job's output as it comes, until the job ends"},
			cmdline.Flag(tail, "tail", nil, "only each rank's last `K` lines"),
		),
		Action: clusterActionWithin(0, func(ctx context.Context, c *cli.Context, cl *storeclient.Client) error {
			if c.NArg() != 1 {
				return cmdline.Usagef(c, "name one job (launcher jobs lists them)")
			}
			req := &musterv1.LogsRequest{JobId: c.Args().First(), Follow: c.Bool("follow")}
			if rank.IsSet() {
				r := rank.Int32()
				req.Rank = &r
			}
			if tail.IsSet() {
				k := tail.Int32()
				req.Tail = &k
			}
			return launch.Logs(ctx, cl, req, os.Stdout, os.Stderr, !rank.IsSet())
		}),
	}
}
