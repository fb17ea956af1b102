package listing

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/musterhq/muster/hostfile"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// JobList is what `launcher jobs -o json|yaml` writes.
type JobList struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"` // JobList
	Items      []Job  `json:"items" yaml:"items"`
}

// Job is one job the store holds, running or ended.
type Job struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"` // Job
	ID         string `json:"id" yaml:"id"`
	Name       string `json:"name" yaml:"name"`
	// State is pending, running, stopping, succeeded, failed or cancelled.
	State string `json:"state" yaml:"state"`
	// ExitCode is the job's exit code once it ended; null before.
	ExitCode *int32 `json:"exitCode" yaml:"exitCode"`
	// User is who submitted it; "" for the cluster operator's jobs, which
	// run as the agents' own users (UID null).
	User    string   `json:"user" yaml:"user"`
	UID     *uint32  `json:"uid" yaml:"uid"`
	Command []string `json:"command" yaml:"command"`
	// Nodes are its current (or last) round's nodes, by node rank.
	Nodes        []string `json:"nodes" yaml:"nodes"`
	NNodes       int32    `json:"nnodes" yaml:"nnodes"`
	NProcPerNode int32    `json:"nprocPerNode" yaml:"nprocPerNode"`
	GPUsPerNode  int32    `json:"gpusPerNode" yaml:"gpusPerNode"`
	// Rounds counts the rounds it began; Restarts those begun after a
	// failure or a lost node, of MaxRestarts.
	Rounds      int32 `json:"rounds" yaml:"rounds"`
	Restarts    int32 `json:"restarts" yaml:"restarts"`
	MaxRestarts int32 `json:"maxRestarts" yaml:"maxRestarts"`
	// Times in RFC 3339, UTC; null until reached (or unknown to a store
	// that took the job over from its agents).
	SubmitTime *string `json:"submitTime" yaml:"submitTime"`
	StartTime  *string `json:"startTime" yaml:"startTime"`
	EndTime    *string `json:"endTime" yaml:"endTime"`
	// Summary says in one line how it ended; "" while it runs and for a
	// job that succeeded.
	Summary string `json:"summary" yaml:"summary"`
	// Hang is who hung, for a job that failed for a hang; null otherwise.
	Hang *Hang `json:"hang" yaml:"hang"`
	// PythonError is what the failed rank's Python raised, when its
	// @record wrote it; null otherwise.
	PythonError *PythonError `json:"pythonError" yaml:"pythonError"`
}

// Jobs turns the store's answer into the schema.
func Jobs(jobs []*musterv1.JobStatus) JobList {
	l := JobList{APIVersion: APIVersion, Kind: "JobList", Items: []Job{}}
	for _, j := range jobs {
		l.Items = append(l.Items, JobOf(j))
	}
	return l
}

// JobOf is one job in the schema.
func JobOf(j *musterv1.JobStatus) Job {
	spec := j.GetSpec()
	out := Job{APIVersion: APIVersion, Kind: "Job", ID: j.GetJobId(), Name: spec.GetName(), State: StateName(j.GetState()),
		Command: []string{}, Nodes: append([]string{}, j.GetNodes()...), NNodes: spec.GetNnodes(),
		NProcPerNode: spec.GetNproc(), GPUsPerNode: spec.GetGpus(), Rounds: j.GetRounds(), Restarts: j.GetRestarts(),
		MaxRestarts: spec.GetMaxRestarts(), SubmitTime: Time(j.GetSubmittedUnixMs()), StartTime: Time(j.GetStartedUnixMs()),
		EndTime: Time(j.GetEndedUnixMs()), Summary: strings.ReplaceAll(j.GetSummary(), "\n", " "), Hang: HangOf(j.GetFailure()),
		PythonError: PythonErrorOf(j.GetFailure())}
	if j.GetState().Ended() {
		code := j.GetExitCode()
		out.ExitCode = &code
	}
	if o := j.GetOwner(); o != nil {
		uid := o.GetUid()
		out.UID, out.User = &uid, o.GetUser()
		if out.User == "" {
			out.User = fmt.Sprint(uid)
		}
	}
	for _, a := range spec.GetArgv() {
		out.Command = append(out.Command, strings.ToValidUTF8(string(a), "\uFFFD"))
	}
	return out
}

// StateName is a job state as the schema spells it: "running".
func StateName(s musterv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

// exitCell is the job's exit code, "-" until it ended.
func (j Job) exitCell() string {
	if j.ExitCode == nil {
		return "-"
	}
	return fmt.Sprint(*j.ExitCode)
}

// userCell names who the job runs as: its submitter, or "(operator)" for
// the cluster operator's jobs, which run as the agents' own users.
func (j Job) userCell() string {
	if j.UID == nil {
		return "(operator)" // submitted with the cluster token
	}
	return j.User
}

// WriteJobs writes the jobs in f.
func WriteJobs(w io.Writer, f Format, l JobList) error {
	if f.Structured() {
		return Write(w, f, l)
	}
	jt := NewJobTable(w, f)
	for _, j := range l.Items {
		jt.Row(j)
	}
	return jt.Flush()
}

// JobTable writes jobs as table rows under one header, for a list or a
// watch (which flushes after each row).
type JobTable struct {
	tw     *tabwriter.Writer
	wide   bool
	header bool
}

// NewJobTable writes a table, wide for Wide.
func NewJobTable(w io.Writer, f Format) *JobTable {
	return &JobTable{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0), wide: f == Wide}
}

// jobColumns are the table's headers, wide or not.
func jobColumns(wide bool) []string {
	if wide {
		return []string{"JOB", "NAME", "STATE", "EXIT", "USER", "NODES", "ROUNDS", "RESTARTS", "SUBMITTED", "STARTED", "ENDED", "COMMAND", "SUMMARY"}
	}
	return []string{"JOB", "STATE", "EXIT", "USER", "NODES", "STARTED", "ENDED", "ROUNDS", "COMMAND", "SUMMARY"}
}

// jobCells are a job's row, in jobColumns' order.
func jobCells(j Job, wide bool) []string {
	exit, user := j.exitCell(), j.userCell()
	command := strings.Join(j.Command, " ")
	cell := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	if !wide {
		return []string{j.ID, j.State, exit, user, orDash(nodesCell(j.Nodes, nodesCellWidth)),
			cell(j.StartTime), cell(j.EndTime), fmt.Sprint(j.Rounds), command, orDash(j.Summary)}
	}
	restarts := fmt.Sprint(j.Restarts)
	if j.MaxRestarts > 0 {
		restarts = fmt.Sprintf("%d/%d", j.Restarts, j.MaxRestarts)
	}
	return []string{j.ID, orDash(j.Name), j.State, exit, user, orDash(hostfile.Compress(j.Nodes)), fmt.Sprint(j.Rounds), restarts,
		cell(j.SubmitTime), cell(j.StartTime), cell(j.EndTime), command, orDash(j.Summary)}
}

func (t *JobTable) writeHeader() {
	if t.header {
		return
	}
	t.header = true
	fmt.Fprintln(t.tw, strings.Join(jobColumns(t.wide), "\t"))
}

// Row adds a job's row, after the header if none was written yet.
func (t *JobTable) Row(j Job) {
	t.writeHeader()
	fmt.Fprintln(t.tw, strings.Join(jobCells(j, t.wide), "\t"))
}

// nodesCellWidth bounds the table's NODES cell: one cell wider than that
// would pad every row of the table to it.
const nodesCellWidth = 32

// nodesCell is a job's nodes as a Slurm hostlist (node[01-40]) when that
// fits in width, else as many of them as fit and how many more
// ("a,b + 38 more"); -o wide, json and yaml and `launcher jobs JOB` name
// them all. The first is named whatever its length.
func nodesCell(nodes []string, width int) string {
	if all := hostfile.Compress(nodes); utf8.RuneCountInString(all) <= width {
		return all
	}
	more := func(n int) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprintf(" + %d more", n)
	}
	cell := nodes[0]
	for i := 1; i < len(nodes); i++ {
		next := cell + "," + nodes[i]
		if utf8.RuneCountInString(next+more(len(nodes)-i-1)) > width {
			return cell + more(len(nodes)-i)
		}
		cell = next
	}
	return cell
}

// Flush writes the rows so far.
func (t *JobTable) Flush() error {
	t.writeHeader() // an empty list still has its header
	return t.tw.Flush()
}

// JobWatch writes the jobs of a watch as they come: table rows under one
// header, one compact JSON object a line, or one YAML document each.
type JobWatch struct {
	w      io.Writer
	f      Format
	widths []int // the table's columns, fixed at the header: rows come one at a time
}

// watchWidths are a watch's columns: wide enough for most of their cells
// (IDs, states, RFC 3339 times), so that rows written one at a time line up
// under the header; a longer cell pushes only its own row.
var watchWidths = map[string]int{"JOB": 15, "NAME": 12, "STATE": 10, "EXIT": 5, "USER": 10, "NODES": nodesCellWidth,
	"ROUNDS": 6, "RESTARTS": 8, "SUBMITTED": 20, "STARTED": 20, "ENDED": 20, "COMMAND": 24}

// NewJobWatch writes a watch's jobs to w in f.
func NewJobWatch(w io.Writer, f Format) *JobWatch {
	return &JobWatch{w: w, f: f}
}

// Write writes one job's change at once.
func (jw *JobWatch) Write(j Job) error {
	if jw.f.Structured() {
		return WriteStream(jw.w, jw.f, j)
	}
	wide := jw.f == Wide
	if jw.widths == nil {
		cols := jobColumns(wide)
		for _, c := range cols {
			jw.widths = append(jw.widths, max(watchWidths[c], len(c)))
		}
		if _, err := io.WriteString(jw.w, padRow(cols, jw.widths)); err != nil {
			return err
		}
	}
	_, err := io.WriteString(jw.w, padRow(jobCells(j, wide), jw.widths))
	return err
}

// padRow is a row's cells, each but the last padded to its width and two
// spaces apart.
func padRow(cells []string, widths []int) string {
	var b strings.Builder
	for i, c := range cells {
		b.WriteString(c)
		if i == len(cells)-1 {
			break
		}
		for n := utf8.RuneCountInString(c); n < widths[i]+2; n++ {
			b.WriteByte(' ')
		}
	}
	b.WriteByte('\n')
	return b.String()
}
