package listing

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// WriteJobDetail writes one job in full, a fact a line, as `launcher jobs
// JOB` shows it: times to the second.
func WriteJobDetail(out io.Writer, j *musterv1.JobStatus) error {
	view := JobOf(j)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	spec := j.GetSpec()
	line := func(k, format string, a ...any) { fmt.Fprintf(w, "%s:\t"+format+"\n", append([]any{k}, a...)...) }
	line("job", "%s", j.JobId)
	if spec.GetName() != "" {
		line("name", "%s", spec.GetName())
	}
	line("state", "%s", view.State)
	line("exit code", "%s", view.exitCell())
	line("summary", "%s", orDash(j.Summary))
	line("user", "%s", view.userCell())
	line("command", "%s", bytes.Join(spec.GetArgv(), []byte(" ")))
	line("spec", "%d node(s), %d worker(s) a node, %d GPU(s) a node, %d restart(s) allowed", spec.GetNnodes(), spec.GetNproc(),
		spec.GetGpus(), spec.GetMaxRestarts())
	line("submitted", "%s", secondsCell(j.SubmittedUnixMs))
	line("started", "%s", secondsCell(j.StartedUnixMs))
	line("ended", "%s", secondsCell(j.EndedUnixMs))
	line("rounds", "%d (%d restart(s))", j.Rounds, j.Restarts)
	for _, r := range j.RoundNodes {
		line(fmt.Sprintf("round %d", r.Number), "%s, started %s", orDash(strings.Join(r.Nodes, ",")), secondsCell(r.StartedUnixMs))
	}
	if len(j.RoundNodes) == 0 {
		line("nodes", "%s", orDash(strings.Join(j.Nodes, ",")))
	}
	if j.Trimmed {
		line("note", "%s", "the history shortened this job's record to its bound (host lists, older rounds, nodes or command left out)")
	}
	for _, st := range j.Workers {
		line("worker", "%s, pid %d", BindingLine(st), st.Pid)
	}
	if j.WorkersLeftOut > 0 {
		line("workers", "%d more not shown", j.WorkersLeftOut)
	}
	if f := j.GetFailure(); f != nil {
		line("failed rank", "%d on %s", f.Rank, orDash(f.Node))
		for _, l := range f.StderrTail {
			line("stderr", "%s", l)
		}
	}
	return w.Flush()
}

// secondsCell is a Unix millisecond time in RFC 3339 to the second, UTC;
// "-" for none.
func secondsCell(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}
