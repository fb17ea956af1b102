package launch

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// Attach follows a job that runs already as the launcher that submitted it
// does: it prints the job's output from event version from on (1: all the
// store still holds), stops the job on Ctrl-C, follows the store across a
// restart or a new leader, and returns the job's exit code. It counts as
// the job's follower: a job nobody follows is stopped, one followed again
// is not.
func Attach(ctx context.Context, log *zap.Logger, c *storeclient.Client, job string, from uint64, opts Options) (int, error) {
	st, err := c.GetJob(ctx, &musterv1.GetJobRequest{JobId: job})
	if err != nil {
		return 1, fmt.Errorf("job %s: %s", job, storeclient.ErrorMessage(err))
	}
	f := &follower{c: c, log: log, opts: opts, job: job, next: max(from, 1), p: NewPrinter(opts.Stdout, opts.Stderr, opts.TagOutput)}
	f.p.only = opts.OutputRanks
	if opts.TimestampOutput {
		f.p.now = time.Now
	}
	if st.GetState().Ended() {
		fmt.Fprintf(opts.Stderr, "muster: job %s has ended (%s): its last events follow\n", job, st.GetState())
	}
	return f.run(ctx)
}
