package listing

import (
	"strings"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Hang is who hung, for a job that ended for a hang: the same fields the
// summary says in words, in `launcher jobs JOB -o json` and `--events`.
type Hang struct {
	// Evidence is what named the culprits: nccl_ras, flight_recorder or
	// heartbeats; "" when it cannot tell.
	Evidence string  `json:"evidence" yaml:"evidence"`
	Culprits []int32 `json:"culprits" yaml:"culprits"`
	// CannotTell says nothing separated Silent, the ranks that went silent
	// within ResolutionMs of each other.
	CannotTell   bool    `json:"cannotTell" yaml:"cannotTell"`
	Silent       []int32 `json:"silent" yaml:"silent"`
	ResolutionMs int64   `json:"resolutionMs" yaml:"resolutionMs"`
	// Waiting are the ranks that waited for the culprits (at most 64 listed;
	// WaitingCount counts them all).
	Waiting      []int32 `json:"waiting" yaml:"waiting"`
	WaitingCount int32   `json:"waitingCount" yaml:"waitingCount"`
	// Collective is the one the others wait in, when known.
	Collective *Collective `json:"collective" yaml:"collective"`
	// SilentMs and TimeoutMs are the first culprit's silence and timeout.
	SilentMs       int64  `json:"silentMs" yaml:"silentMs"`
	TimeoutMs      int64  `json:"timeoutMs" yaml:"timeoutMs"`
	FlightRecorder string `json:"flightRecorder" yaml:"flightRecorder"`
}

// Collective is a collective operation of a job's ranks.
type Collective struct {
	Op               string `json:"op" yaml:"op"`
	Seq              int64  `json:"seq" yaml:"seq"`
	ProcessGroup     string `json:"processGroup" yaml:"processGroup"`
	ProcessGroupName string `json:"processGroupName" yaml:"processGroupName"`
	Communicator     string `json:"communicator" yaml:"communicator"`
}

// PythonError is the exception a failed rank's Python raised, as
// torch.distributed.elastic's @record wrote it.
type PythonError struct {
	Type    string `json:"type" yaml:"type"`
	Message string `json:"message" yaml:"message"`
	// Frames are its traceback's last frames, innermost last.
	Frames []string `json:"frames" yaml:"frames"`
}

// PythonErrorOf is a failed worker's Python exception in the schema; nil
// when it wrote none.
func PythonErrorOf(ex *musterv1.WorkerExited) *PythonError {
	e := ex.GetPythonError()
	if e == nil {
		return nil
	}
	return &PythonError{Type: e.GetType(), Message: e.GetMessage(), Frames: append([]string{}, e.GetFrames()...)}
}

// HangOf is a failed worker's hang in the schema; nil when it did not hang.
func HangOf(ex *musterv1.WorkerExited) *Hang {
	h := ex.GetHang()
	if h == nil {
		return nil
	}
	v := h.GetVerdict()
	out := &Hang{Culprits: append([]int32{}, v.GetCulprits()...), CannotTell: v.GetCannotTell(), Silent: append([]int32{}, v.GetSilent()...),
		ResolutionMs: v.GetResolutionMs(), Waiting: append([]int32{}, h.GetWaiting()...), WaitingCount: h.GetWaitingCount(),
		SilentMs: h.GetSilentMs(), TimeoutMs: h.GetTimeoutMs(), FlightRecorder: h.GetFlightRecorder()}
	if e := v.GetEvidence(); e != musterv1.HangEvidence_HANG_EVIDENCE_UNSPECIFIED {
		out.Evidence = strings.ToLower(strings.TrimPrefix(e.String(), "HANG_EVIDENCE_"))
	}
	if v == nil {
		// An agent that stopped its hung worker alone names it.
		out.Culprits = append([]int32{ex.GetRank()}, h.GetAlsoHung()...)
	}
	if c := v.GetCollective(); c != nil {
		out.Collective = &Collective{Op: c.GetOp(), Seq: c.GetSeq(), ProcessGroup: c.GetProcessGroup(),
			ProcessGroupName: c.GetProcessGroupName(), Communicator: c.GetCommunicator()}
	}
	return out
}
