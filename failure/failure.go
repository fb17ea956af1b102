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
	case ex.GetHang() != nil:
		return who + " " + DescribeHang(ex.GetHang())
	case ex.GetError() != "":
		return who + ": " + ex.GetError()
	case ex.GetSignal() != 0:
		return fmt.Sprintf("%s was killed by signal %d (%s)", who, ex.GetSignal(), unix.SignalName(unix.Signal(ex.GetSignal())))
	}
	return fmt.Sprintf("%s exited with code %d", who, ex.GetExitCode())
}

// DescribeHang says how a worker was found hung, without its name: "hung:
// no heartbeat for 10.0 s (--hang-timeout 10s); ranks 0, 2, 3 were waiting;
// its NCCL flight recorder is in /logs/j-1/nccl-trace-rank-1".
func DescribeHang(h *musterv1.WorkerHang) string {
	timeout := time.Duration(h.GetTimeoutMs()) * time.Millisecond
	s := "hung: no heartbeat for " + seconds(time.Duration(h.GetSilentMs())*time.Millisecond)
	if h.GetNeverBeat() {
		s = "hung: no first heartbeat in " + seconds(time.Duration(h.GetSilentMs())*time.Millisecond) +
			" (--hang-first-timeout " + timeout.String() + ")"
	} else {
		s += " (--hang-timeout " + timeout.String() + ")"
	}
	if also := h.GetAlsoHung(); len(also) > 0 {
		s += "; " + ranks(also, len(also)) + " hung too"
	}
	if n := int(h.GetWaitingCount()); n > 0 {
		s += "; " + ranks(h.GetWaiting(), n) + " were waiting"
		if n == 1 {
			s = strings.TrimSuffix(s, "were waiting") + "was waiting"
		}
	}
	if fr := h.GetFlightRecorder(); fr != "" {
		s += "; its NCCL flight recorder is in " + fr
	}
	return s
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
