// Package failure is the one meaning of "a worker failed" and "a node was
// lost", shared by the store, which ends jobs for them, and the agents,
// which stop their own workers at once for them: what counts as a failure,
// the exit code it gives a job, and the words that describe it.
package failure

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Failed says whether a worker's end fails its job: it exited non-zero, a
// signal killed it, or it could not be started or reaped, and muster itself
// did not stop it; or its agent found it hung, however it then ended. The
// first failed worker stops the job everywhere.
func Failed(ex *musterv1.WorkerExited) bool {
	return ex.GetHang() != nil || !ex.GetStopped() && (ex.GetExitCode() != 0 || ex.GetSignal() != 0 || ex.GetError() != "")
}

// ExitCode is the shell's code for a worker's end: its exit status, or
// 128+signal; 1 for a worker that could not be run.
func ExitCode(ex *musterv1.WorkerExited) int32 {
	if ex.GetSignal() != 0 {
		return 128 + ex.GetSignal()
	}
	if ex.GetExitCode() == 0 && (ex.GetError() != "" || ex.GetHang() != nil) {
		return 1
	}
	return ex.GetExitCode()
}

// Describe says in one line how a failed worker of a job of spec ended,
// naming its rank, node and local rank.
func Describe(spec *musterv1.JobSpec, ex *musterv1.WorkerExited) string {
	who := fmt.Sprintf("rank %d (node %s, local rank %d)", ex.GetRank(), ex.GetNode(), ex.GetLocalRank())
	if spec.GetMpi() == "openmpi" {
		// The workers of an Open MPI job are mpirun and the nodes' daemons,
		// not MPI ranks: mpirun's own message names the rank.
		who = "mpirun (node " + ex.GetNode() + ")"
		if ex.GetRank() != 0 {
			who = "the Open MPI daemon on node " + ex.GetNode()
		}
	}
	switch {
	case ex.GetHang().GetVerdict().GetCannotTell():
		v := ex.GetHang().GetVerdict()
		return ranks(v.GetSilent(), int(v.GetSilentCount())) + " " + DescribeHang(ex.GetHang())
	case ex.GetHang() != nil:
		return who + " " + DescribeHang(ex.GetHang())
	case ex.GetError() != "":
		return who + ": " + ex.GetError()
	case ex.GetCause() == musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED && ex.GetSignal() == int32(unix.SIGKILL):
		return who + " was killed by the kernel's OOM killer" + memoryLimit(ex)
	case ex.GetSignal() != 0:
		return fmt.Sprintf("%s was killed by signal %d (%s)", who, ex.GetSignal(), unix.SignalName(unix.Signal(ex.GetSignal()))) + because(ex)
	}
	return fmt.Sprintf("%s exited with code %d", who, ex.GetExitCode()) + because(ex) + raised(ex.GetPythonError())
}

// raised says what a worker's Python raised, as @record wrote it: ":
// ValueError: bad batch, raised at File "train.py", line 41, in step".
func raised(e *musterv1.PythonError) string {
	if e == nil {
		return ""
	}
	s := ": " + e.GetType()
	if m := e.GetMessage(); m != "" {
		s += ": " + m
	}
	if f := e.GetFrames(); len(f) > 0 {
		s += ", raised at " + f[len(f)-1]
	}
	return s
}

// because says what the kernel or a GPU told of a worker's end beyond its
// exit code or signal, "" when nothing.
func because(ex *musterv1.WorkerExited) string {
	switch ex.GetCause() {
	case musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED:
		return " after the kernel's OOM killer killed one of its processes" + memoryLimit(ex)
	case musterv1.ExitCause_EXIT_CAUSE_GPU_XID:
		s := fmt.Sprintf(" after GPU %d reported XID %d", ex.GetGpu(), ex.GetXid())
		if name := xidNames[ex.GetXid()]; name != "" {
			s += " (" + name + ")"
		}
		return s
	case musterv1.ExitCause_EXIT_CAUSE_RLIMIT_CPU:
		return ": it used up its CPU time limit (ulimit -t)"
	case musterv1.ExitCause_EXIT_CAUSE_RLIMIT_FSIZE:
		return ": it wrote past its file size limit (ulimit -f)"
	case musterv1.ExitCause_EXIT_CAUSE_CGROUP_PIDS:
		return " after its cgroup refused a fork at its limit of processes (pids.max)"
	}
	return ""
}

func memoryLimit(ex *musterv1.WorkerExited) string {
	if l := ex.GetMemoryLimitBytes(); l > 0 {
		return " (memory limit " + Bytes(l) + " of its cgroup)"
	}
	return ""
}

// Bytes words a size for people: 512 MiB, 1.5 GiB, 4096 bytes.
func Bytes(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v, u = v/1024, u+1
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + units[u]
}

// xidNames are the XID errors a job most often dies of, as NVIDIA's XID
// catalogue names them.
var xidNames = map[int32]string{
	13:  "graphics engine exception",
	31:  "GPU memory page fault",
	43:  "GPU stopped processing",
	45:  "preemptive cleanup, due to previous errors",
	48:  "double bit ECC error",
	61:  "internal micro-controller breakpoint",
	62:  "internal micro-controller halt",
	63:  "ECC page retirement or row remapping",
	64:  "ECC page retirement or row remapper recording failure",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
}

// Facts are what the kernel and the GPUs said of a worker's end, beyond its
// wait status, as the agent that ran it gathered them.
type Facts struct {
	// OOMKills is how many processes of the worker's own cgroup the OOM
	// killer killed; MemoryLimit is that cgroup's limit (0: none set).
	OOMKills    int64
	MemoryLimit int64
	// PidsRefused is how many forks the cgroup's pids limit refused.
	PidsRefused int64
	// XIDs are the XID errors the worker's GPUs reported while it ran.
	XIDs []XID
}

// XID is one XID error of one GPU.
type XID struct {
	GPU  int32
	Code int32
}

// Explain sets ex's cause from what its agent learned: the OOM killer
// first (its SIGKILL is the end itself), then a GPU's XID error, then a
// resource limit's signal or refusal. A worker that ended well, or that
// muster stopped, gets no cause.
func Explain(ex *musterv1.WorkerExited, f Facts) {
	ex.Cause, ex.MemoryLimitBytes, ex.Xid, ex.Gpu = musterv1.ExitCause_EXIT_CAUSE_UNSPECIFIED, 0, 0, 0
	if ex.GetStopped() || (ex.GetExitCode() == 0 && ex.GetSignal() == 0) || ex.GetError() != "" {
		return
	}
	switch {
	case f.OOMKills > 0:
		ex.Cause, ex.MemoryLimitBytes = musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED, f.MemoryLimit
	case len(f.XIDs) > 0:
		ex.Cause, ex.Gpu, ex.Xid = musterv1.ExitCause_EXIT_CAUSE_GPU_XID, f.XIDs[0].GPU, f.XIDs[0].Code
	case ex.GetSignal() == int32(unix.SIGXCPU):
		ex.Cause = musterv1.ExitCause_EXIT_CAUSE_RLIMIT_CPU
	case ex.GetSignal() == int32(unix.SIGXFSZ):
		ex.Cause = musterv1.ExitCause_EXIT_CAUSE_RLIMIT_FSIZE
	case f.PidsRefused > 0:
		ex.Cause = musterv1.ExitCause_EXIT_CAUSE_CGROUP_PIDS
	}
}

// DescribeHang says how a worker was found hung, without its name: what
// the evidence said of it, "hung: no heartbeat for 10.0 s (--hang-timeout
// 10s); ranks 0, 2, 3 were waiting; its NCCL flight recorder is in
// /logs/j-1/nccl-trace-rank-1", and which evidence that was.
func DescribeHang(h *musterv1.WorkerHang) string {
	v := h.GetVerdict()
	if v.GetCannotTell() {
		return fmt.Sprintf("hung, and heartbeats cannot tell which rank hung first: they went silent within %d ms of each other",
			v.GetResolutionMs()) + silence(h)
	}
	s := "hung: " + strings.TrimPrefix(silence(h), "; ")
	if w := waitedIn(v); w != "" {
		s = "hung: " + w + silence(h)
	}
	also := h.GetAlsoHung()
	if len(v.GetCulprits()) > 1 {
		also = v.GetCulprits()[1:]
	}
	if len(also) > 0 {
		s += "; " + ranks(also, len(also)) + " hung too"
	}
	if n := int(h.GetWaitingCount()); n > 0 {
		s += "; " + ranks(h.GetWaiting(), n) + " were waiting"
		if n == 1 {
			s = strings.TrimSuffix(s, "were waiting") + "was waiting"
		}
	}
	if e := evidence(v); e != "" {
		s += "; evidence: " + e
	}
	if fr := h.GetFlightRecorder(); fr != "" {
		s += "; its NCCL flight recorder is in " + fr
	}
	return s
}

// silence says how long a hung worker gave no heartbeat: "; no heartbeat
// for 10.0 s (--hang-timeout 10s)"; "" when its agent did not say.
func silence(h *musterv1.WorkerHang) string {
	if h.GetTimeoutMs() == 0 {
		return ""
	}
	timeout := time.Duration(h.GetTimeoutMs()) * time.Millisecond
	silent := seconds(time.Duration(h.GetSilentMs()) * time.Millisecond)
	if h.GetNeverBeat() {
		return "; no first heartbeat in " + silent + " (--hang-first-timeout " + timeout.String() + ")"
	}
	return "; no heartbeat for " + silent + " (--hang-timeout " + timeout.String() + ")"
}

// waitedIn says what the culprits did not do that the others wait for: "it
// never entered nccl:all_reduce #21 of process group 0 (default_pg)".
func waitedIn(v *musterv1.HangVerdict) string {
	c := v.GetCollective()
	switch v.GetEvidence() {
	case musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS:
		if v.GetMissing() {
			return fmt.Sprintf("its process stopped answering NCCL (no data from it for communicator %s, where the others launched %s up to operation %d)",
				c.GetCommunicator(), c.GetOp(), c.GetSeq())
		}
		return fmt.Sprintf("it launched %s only up to operation %d, where the others launched up to %d (NCCL communicator %s)",
			c.GetOp(), v.GetLaunched(), c.GetSeq(), c.GetCommunicator())
	case musterv1.HangEvidence_HANG_EVIDENCE_PROCESS_STOPPED:
		return "its process was stopped (SIGSTOP or a debugger), so it entered no collective"
	case musterv1.HangEvidence_HANG_EVIDENCE_FLIGHT_RECORDER:
		pg := c.GetProcessGroup()
		if name := c.GetProcessGroupName(); name != "" && name != pg {
			pg += " (" + name + ")"
		}
		return fmt.Sprintf("it never entered %s #%d of process group %s", c.GetOp(), c.GetSeq(), pg)
	}
	return ""
}

// evidence names what said who hung.
func evidence(v *musterv1.HangVerdict) string {
	switch v.GetEvidence() {
	case musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS:
		return "NCCL's RAS"
	case musterv1.HangEvidence_HANG_EVIDENCE_FLIGHT_RECORDER:
		return "PyTorch's flight recorders"
	case musterv1.HangEvidence_HANG_EVIDENCE_PROCESS_STOPPED:
		return "its process's state"
	case musterv1.HangEvidence_HANG_EVIDENCE_HEARTBEATS:
		if v.GetLeadMs() > 0 {
			return fmt.Sprintf("heartbeats (its last %d ms before any other rank's)", v.GetLeadMs())
		}
		return "heartbeats (the only silent rank)"
	}
	return ""
}

// ranks names ranks: "rank 3", "ranks 0, 2, 3", "ranks 0, 1, … (70 in all)".
func ranks(listed []int32, count int) string {
	names := make([]string, len(listed))
	for i, r := range listed {
		names[i] = strconv.Itoa(int(r))
	}
	s := "rank"
	if count > 1 {
		s = "ranks"
	}
	s += " " + strings.Join(names, ", ")
	if count > len(listed) {
		s += fmt.Sprintf(", … (%d in all)", count)
	}
	return s
}

// Loss builds a NodeLoss: node lost by signal, as seen by observer (""
// for the store), silent for silent.
func Loss(node string, signal musterv1.LossSignal, observer string, silent time.Duration, detail string) *musterv1.NodeLoss {
	return &musterv1.NodeLoss{Node: node, Observer: observer, Signal: signal, SilentMs: silent.Milliseconds(), Detail: detail}
}

// DescribeLoss says in one line how a node was lost, who else saw it, and
// when its workers are certainly gone: "node b lost: no gossip ack for
// 5.2 s, nothing from its agent for 5.4 s, confirmed by node a; its
// workers are certain to be gone by 14:03:05 UTC".
func DescribeLoss(l *musterv1.NodeLoss) string {
	s := "node " + l.GetNode() + " lost: " + Cause(l)
	if l.GetStoreCutOff() {
		// The store's side of it: many nodes went silent to it at once.
		s = "node " + l.GetNode() + " lost the store, which had lost contact with many of its nodes at once (most likely the store's own node was cut off): " + Cause(l)
	}
	if o := l.GetObserver(); o != "" && o != l.GetNode() {
		s += " (seen by node " + o + ")"
	}
	if ms := l.GetStoreSilentMs(); ms >= 100 && l.GetSignal() == musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD {
		s += ", nothing from its agent for " + seconds(time.Duration(ms)*time.Millisecond)
	}
	if by := l.GetConfirmedBy(); len(by) > 0 {
		s += ", confirmed by node " + strings.Join(by, ", node ")
	}
	if at := l.GetWorkersGoneByUnixMs(); at > 0 {
		s += "; its workers are certain to be gone by " + time.UnixMilli(at).UTC().Format("15:04:05") + " UTC"
	}
	return s
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

// Cause says what told of the loss, without the node's name.
func Cause(l *musterv1.NodeLoss) string {
	silent := time.Duration(l.GetSilentMs()) * time.Millisecond
	within := ""
	if silent > 0 {
		within = " within " + silent.String()
	}
	var s string
	switch l.GetSignal() {
	case musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD:
		s = "no gossip ack"
		if silent > 0 {
			s += " for " + seconds(silent)
		}
	case musterv1.LossSignal_LOSS_SIGNAL_AGENT_GONE:
		s = "agent connection closed"
	case musterv1.LossSignal_LOSS_SIGNAL_SESSION_EXPIRED:
		s = "its agent's connection broke and it did not come back"
		if l.GetDetail() != "" {
			s = l.GetDetail() + ", and its agent did not come back"
		}
		return s + within
	case musterv1.LossSignal_LOSS_SIGNAL_JOB_FORGOTTEN:
		s = "its agent registered again without the job (its assignment was lost)"
	case musterv1.LossSignal_LOSS_SIGNAL_UNREAD_COMMANDS:
		s = "it left the store's commands unread"
	case musterv1.LossSignal_LOSS_SIGNAL_REPLACED:
		s = "registered again"
	case musterv1.LossSignal_LOSS_SIGNAL_NOT_BACK:
		s = "its agent did not register" + within + " of the store's restart"
	case musterv1.LossSignal_LOSS_SIGNAL_LEFT:
		s = "it left the cluster"
	case musterv1.LossSignal_LOSS_SIGNAL_STORE_CLOSING:
		s = "store closing"
	case musterv1.LossSignal_LOSS_SIGNAL_SILENT:
		s = "nothing from its agent"
		if silent > 0 {
			s += " for " + seconds(silent)
		}
	default:
		s = "lost"
	}
	if d := l.GetDetail(); d != "" {
		s += " (" + d + ")"
	}
	return s
}

// ExitCause names how a worker ended in one word from a fixed set, for
// metrics' labels: "exited" (code 0), "stopped" (by muster), "node_lost",
// "not_started" (it could not be run or reaped), what the kernel said
// ("oom_killed", "gpu_xid", "rlimit_cpu", "rlimit_fsize", "cgroup_pids"),
// else "signal" or "exit_code".
func ExitCause(ex *musterv1.WorkerExited) string {
	switch {
	case ex.GetNodeLoss() != nil:
		return "node_lost"
	case ex.GetStopped():
		return "stopped"
	case ex.GetError() != "":
		return "not_started"
	}
	switch ex.GetCause() {
	case musterv1.ExitCause_EXIT_CAUSE_OOM_KILLED:
		return "oom_killed"
	case musterv1.ExitCause_EXIT_CAUSE_GPU_XID:
		return "gpu_xid"
	case musterv1.ExitCause_EXIT_CAUSE_RLIMIT_CPU:
		return "rlimit_cpu"
	case musterv1.ExitCause_EXIT_CAUSE_RLIMIT_FSIZE:
		return "rlimit_fsize"
	case musterv1.ExitCause_EXIT_CAUSE_CGROUP_PIDS:
		return "cgroup_pids"
	}
	switch {
	case ex.GetSignal() != 0:
		return "signal"
	case ex.GetExitCode() != 0:
		return "exit_code"
	}
	return "exited"
}

// LossCause names the signal of a loss in one word from a fixed set, for
// metrics' labels: "gossip_dead", "agent_gone", "silent", "left" and the
// other LossSignal values, lower case and without their prefix.
func LossCause(l *musterv1.NodeLoss) string {
	name, ok := musterv1.LossSignal_name[int32(l.GetSignal())]
	if !ok || l.GetSignal() == musterv1.LossSignal_LOSS_SIGNAL_UNSPECIFIED {
		return "unknown"
	}
	return strings.ToLower(strings.TrimPrefix(name, "LOSS_SIGNAL_"))
}
