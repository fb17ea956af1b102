package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/musterhq/muster/listing"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/musterhq/muster/cmdline"
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
	return printJob(c.App.Writer, j)
}

// printJob shows one job in full, a fact a line.
func printJob(out io.Writer, j *musterv1.JobStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	spec := j.GetSpec()
	line := func(k, format string, a ...any) { fmt.Fprintf(w, "%s:\t"+format+"\n", append([]any{k}, a...)...) }
	line("job", "%s", j.JobId)
	if spec.GetName() != "" {
		line("name", "%s", spec.GetName())
	}
	line("state", "%s", jobState(j))
	line("exit code", "%s", jobExit(j))
	line("summary", "%s", orDash(j.Summary))
	line("user", "%s", owner(j.GetOwner()))
	line("command", "%s", bytes.Join(spec.GetArgv(), []byte(" ")))
	line("spec", "%d node(s), %d worker(s) a node, %d GPU(s) a node, %d restart(s) allowed", spec.GetNnodes(), spec.GetNproc(),
		spec.GetGpus(), spec.GetMaxRestarts())
	line("submitted", "%s", timeOf(j.SubmittedUnixMs))
	line("started", "%s", timeOf(j.StartedUnixMs))
	line("ended", "%s", timeOf(j.EndedUnixMs))
	line("rounds", "%d (%d restart(s))", j.Rounds, j.Restarts)
	for _, r := range j.RoundNodes {
		line(fmt.Sprintf("round %d", r.Number), "%s, started %s", orDash(strings.Join(r.Nodes, ",")), timeOf(r.StartedUnixMs))
	}
	if len(j.RoundNodes) == 0 {
		line("nodes", "%s", orDash(strings.Join(j.Nodes, ",")))
	}
	if j.Trimmed {
		line("note", "%s", "the history shortened this job's record to its bound (host lists, older rounds, nodes or command left out)")
	}
	if f := j.GetFailure(); f != nil {
		line("failed rank", "%d on %s", f.Rank, orDash(f.Node))
		for _, l := range f.StderrTail {
			line("stderr", "%s", l)
		}
	}
	return w.Flush()
}

// jobState is a job's state as a word: running, failed, ...
func jobState(j *musterv1.JobStatus) string {
	return strings.ToLower(strings.TrimPrefix(j.State.String(), "JOB_STATE_"))
}

// jobExit is a job's exit code, "-" until it ended.
func jobExit(j *musterv1.JobStatus) string {
	switch j.State {
	case musterv1.JobState_JOB_STATE_SUCCEEDED, musterv1.JobState_JOB_STATE_FAILED, musterv1.JobState_JOB_STATE_CANCELLED:
		return fmt.Sprint(j.ExitCode)
	}
	return "-"
}

// timeOf is a Unix millisecond time in RFC 3339, UTC; "-" for none.
func timeOf(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// owner names who a job runs as: its submitter, or "(operator)" for the
// cluster operator's jobs, which run as the agents' own users.
func owner(id *musterv1.Identity) string {
	switch {
	case id == nil:
		return "(operator)" // submitted with the cluster token
	case id.GetUser() != "":
		return id.GetUser()
	}
	return fmt.Sprint(id.GetUid())
}
