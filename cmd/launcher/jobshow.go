package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
	"github.com/musterhq/muster/listing"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// showJob is `launcher jobs JOB`: one job, running or from the store's
// history, in full.
func showJob(ctx context.Context, c *cli.Context, cl *storeclient.Client) error {
	if c.NArg() > 1 {
		return cmdline.Usagef(c, "name one job at most (unexpected %q)", c.Args().Get(1))
	}
	if c.Bool("watch") {
		return cmdline.Usagef(c, "--watch follows every job: give no JOB with it")
	}
	j, err := cl.GetJob(ctx, &musterv1.GetJobRequest{JobId: c.Args().First()})
	if err != nil {
		return err
	}
	if f, _ := outputFormat(c); f.Structured() {
		return listing.Write(c.App.Writer, f, listing.JobOf(j))
	}
	return listing.WriteJobDetail(c.App.Writer, j)
}
