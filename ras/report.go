// Package ras asks NCCL's RAS service (NCCL 2.24 and later) what the
// processes of a job are doing, and reads its report: per communicator, the
// ranks that launched fewer collective operations than the others and the
// ranks RAS got no data from. muster's agent asks it when a job hangs, to learn
// which rank never entered a collective.
//
// Every NCCL process runs a RAS thread; one per node listens on a TCP port
// (NCCL_RAS_ADDR, localhost:28028 by default) and, asked on any node, answers
// for the whole job. The protocol is lines of text: the client sends
// "CLIENT PROTOCOL 2", then optionally "TIMEOUT <secs>" and, from NCCL 2.28.7,
// "SET FORMAT json", then "STATUS" or "VERBOSE STATUS"; the report follows
// until the server closes the connection.
package ras

// DefaultAddr is where NCCL's RAS service listens when NCCL_RAS_ADDR is unset.
const DefaultAddr = "localhost:28028"

// MaxReportSize bounds a report, read or parsed: a text report names only the
// outliers and stays small; a JSON one lists every rank of every communicator.
const MaxReportSize = 1 << 20

// Bounds on what one report may hold; past them the parsers stop adding and
// set Report.Truncated.
const (
	maxComms      = 4096
	maxMembers    = 65536 // members and processes over the whole report
	maxGroups     = 4096
	maxOpsPerComm = 32 // NCCL counts 5 collectives
	maxGPUs       = 64 // per process: NCCL keeps a 64-bit device mask
	maxGPUIndex   = 1 << 16
	maxInt32      = 1<<31 - 1
)

// Report is what NCCL's RAS service said of a job: per communicator, the
// ranks that are behind or missing.
type Report struct {
	ServerProtocol int    // from "SERVER PROTOCOL <n>"; 0 when parsed from bytes
	Format         string // "text" or "json"
	NCCLVersion    string // of the process that answered, e.g. "2.28.9"

	// Job totals from the text report's summary; 0 when not printed.
	Nodes, Processes, GPUs int

	// Groups are the rows of the text report's communicator table: NCCL
	// groups like communicators and names only those with a problem.
	Groups []Group

	// Comms are the communicators with something wrong in a text report, and
	// every communicator in a JSON one.
	Comms []Comm

	// Job processes RAS got no data from, and those it considers dead.
	// NCCL may print only the count (see the Count fields).
	MissingProcesses    []Process
	MissingProcessCount int
	DeadProcesses       []Process
	DeadProcessCount    int
	Timeouts            int    // communication timeouts while RAS gathered the data
	Complete            bool   // text: the report reached its last section (Warnings); JSON: always
	Truncated           bool   // the report held more than the package keeps
	Raw                 []byte // the report as Query read it, at most MaxReportSize; nil from the parsers
}

// Group is one row of the text report's communicator table.
type Group struct {
	Index        int    // the G of "#G-I" labels
	Comms        int    // communicators in the group
	Nodes        int    // nodes per communicator
	RanksPerNode string // "4", or "3-4" when it varies
	Size         int    // ranks per communicator
	Ranks        int    // distinct GPUs over the group
	State        string // RUNNING, INIT, FINALIZE, ABORT, NOCOMM (UNKNOWN before 2.26)
	Status       string // OK, MISMATCH, INCOMPLETE, ERROR, or several joined by ","
}

// Comm is one communicator.
type Comm struct {
	Label  string // "#G-I" in a text report: group G, I-th in it; "" in JSON
	ID     string // the communicator hash as the text report prints it, e.g. "5974ff3706582d81"
	Size   int    // number of ranks, 0 if unknown
	State  string // the furthest state of any rank: RUNNING, INIT, FINALIZE, ABORT
	Status string // "OK", or INCOMPLETE, ERROR, MISMATCH joined by "," as NCCL prints them

	// Op, Launched and Behind repeat Ops[0]: the first collective (in NCCL's
	// order Broadcast, Reduce, AllGather, ReduceScatter, AllReduce) whose
	// counts differ.
	Op       string
	Launched int64
	Behind   []Member
	Ops      []OpMismatch

	Missing      []Member // ranks RAS got no data from (a stopped or dead process)
	MissingCount int      // as NCCL counts them; it may name fewer

	// StatusOutliers are ranks NCCL names under "different status" (Status
	// set): NOCOMM when the process answered without this communicator
	// (destroyed, or never created), INIT, FINALIZE or ABORT.
	StatusOutliers []Member

	// Errors are ranks that reported an NCCL error (Error set).
	Errors []Member
}

// OpMismatch is one collective whose operation counts differ between the
// ranks of a communicator.
type OpMismatch struct {
	Op          string // "AllReduce"...; "collective" before NCCL 2.26, which counted all collectives together
	Launched    int64  // the highest count any rank launched up to: what the others reached
	BehindRanks int    // ranks below Launched, named or not: NCCL names only the outliers
	Behind      []Member
}

// Member is one rank of a communicator.
type Member struct {
	CommRank int    // rank in the communicator, which need not be the job rank
	GPU      int    // CUDA device of its process; -1 if not printed
	NVMLGPU  int    // NVML (physical) index; same as GPU unless NCCL printed "(NVML n)"
	PID      int    // 0 if unknown
	Node     string // address as printed, "" if unknown
	Launched int64  // its own operation count, 0 if not applicable
	Status   string // in Comm.StatusOutliers
	Error    string // in Comm.Errors, e.g. "Remote process error"
}

// Process is one process of the job.
type Process struct {
	PID      int
	Node     string
	GPUs     []int // CUDA devices
	NVMLGPUs []int // NVML indices, same as GPUs unless NCCL printed them apart
}

// Culprit is a rank that holds a communicator back.
type Culprit struct {
	Comm string // Comm.ID
	Op   string // the collective it is behind in; "" when Missing
	Member
	Missing        bool  // RAS got no data from its process
	OthersLaunched int64 // what the other ranks launched up to, 0 when Missing
}

// Culprits returns the members named behind or missing, across
// communicators, each once per (communicator, rank): behind in the first
// collective it is behind in, then the missing ones.
func (r *Report) Culprits() []Culprit {
	var out []Culprit
	for _, c := range r.Comms {
		seen := make(map[int]bool)
		for _, op := range c.Ops {
			for _, m := range op.Behind {
				if seen[m.CommRank] {
					continue
				}
				seen[m.CommRank] = true
				out = append(out, Culprit{Comm: c.ID, Op: op.Op, Member: m, OthersLaunched: op.Launched})
			}
		}
		for _, m := range c.Missing {
			if seen[m.CommRank] {
				continue
			}
			seen[m.CommRank] = true
			out = append(out, Culprit{Comm: c.ID, Member: m, Missing: true})
		}
	}
	return out
}

// The communicator states NCCL prints, least advanced first; a communicator
// shows its furthest one (statusStr in NCCL's client_support.cc).
var stateOrder = []string{"NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT"}

func stateRank(s string) int {
	for i, v := range stateOrder {
		if v == s {
			return i
		}
	}
	return -1 // UNKNOWN, before 2.26
}

// joinStatus writes the flags as NCCL's errorStr does.
func joinStatus(incomplete, failed, mismatch bool) string {
	s := ""
	add := func(ok bool, word string) {
		if !ok {
			return
		}
		if s != "" {
			s += ","
		}
		s += word
	}
	add(incomplete, "INCOMPLETE")
	add(failed, "ERROR")
	add(mismatch, "MISMATCH")
	if s == "" {
		return "OK"
	}
	return s
}

// finishOp derives the op's totals from the counts NCCL printed (or the JSON
// held): each count with how many ranks reached it, and the named members.
func finishOp(op *OpMismatch, counts []launchCount, named []Member) {
	for _, c := range counts {
		op.Launched = max(op.Launched, c.launched)
	}
	for _, m := range named {
		op.Launched = max(op.Launched, m.Launched)
	}
	for _, c := range counts {
		if c.launched < op.Launched {
			op.BehindRanks += c.ranks
		}
	}
	op.Behind = nil
	for _, m := range named {
		if m.Launched < op.Launched {
			op.Behind = append(op.Behind, m)
		}
	}
	op.BehindRanks = max(op.BehindRanks, len(op.Behind))
}

// launchCount is one "N ranks have launched up to operation V".
type launchCount struct {
	launched int64
	ranks    int
}
