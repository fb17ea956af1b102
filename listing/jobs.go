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

func (t *JobTable) writeHeader() {
	if t.header {
		return
	}
	t.header = true
	if t.wide {
		fmt.Fprintln(t.tw, "JOB\tNAME\tSTATE\tEXIT\tUSER\tNODES\tROUNDS\tRESTARTS\tSUBMITTED\tSTARTED\tENDED\tCOMMAND\tSUMMARY")
	} else {
		fmt.Fprintln(t.tw, "JOB\tSTATE\tEXIT\tUSER\tNODES\tSTARTED\tENDED\tROUNDS\tCOMMAND\tSUMMARY")
	}
}

// Row adds a job's row, after the header if none was written yet.
func (t *JobTable) Row(j Job) {
	t.writeHeader()
	exit, user := j.exitCell(), j.userCell()
	command := strings.Join(j.Command, " ")
	cell := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	if !t.wide {
		fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", j.ID, j.State, exit, user, orDash(nodesCell(j.Nodes, nodesCellWidth)),
			cell(j.StartTime), cell(j.EndTime), j.Rounds, command, orDash(j.Summary))
		return
	}
	restarts := fmt.Sprint(j.Restarts)
	if j.MaxRestarts > 0 {
		restarts = fmt.Sprintf("%d/%d", j.Restarts, j.MaxRestarts)
	}
	fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, orDash(j.Name), j.State, exit, user,
		orDash(hostfile.Compress(j.Nodes)), j.Rounds, restarts, cell(j.SubmitTime), cell(j.StartTime), cell(j.EndTime), command, orDash(j.Summary))
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
	w     io.Writer
	f     Format
	table *JobTable
}

// NewJobWatch writes a watch's jobs to w in f.
func NewJobWatch(w io.Writer, f Format) *JobWatch {
	jw := &JobWatch{w: w, f: f}
	if !f.Structured() {
		jw.table = NewJobTable(w, f)
	}
	return jw
}

// Write writes one job's change at once.
func (jw *JobWatch) Write(j Job) error {
	if jw.table != nil {
		jw.table.Row(j)
		return jw.table.Flush()
	}
	return WriteStream(jw.w, jw.f, j)
}
