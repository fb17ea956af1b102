// Package eventfile writes a job's lifecycle as JSON lines (launcher run
// --events FILE), one object a line in a stable schema, as torchelastic's
// event handler does: submitted, waiting for nodes, each round with its
// nodes and unique-ID hash, each rank's start and exit, a node's loss, a
// restart, the end. Every line has type, time (RFC 3339, UTC,
// microseconds) and job; the other fields depend on the type.
package eventfile

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/failure"
	"github.com/musterhq/muster/listing"
	"github.com/musterhq/muster/ownfile"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// The types of the lines.
const (
	TypeSubmitted      = "submitted"
	TypeWaiting        = "waiting"
	TypeRoundStarted   = "round_started"
	TypeWorkerStarted  = "worker_started"
	TypeWorkerExited   = "worker_exited"
	TypeNodeLost       = "node_lost"
	TypeRestart        = "restart"
	TypeEnded          = "ended"
	TypeOutputLost     = "output_lost"
	TypeStoreRestarted = "store_restarted"
)

// TimeLayout is the lines' time: RFC 3339 in UTC with microseconds.
const TimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// Header begins every line.
type Header struct {
	Type string `json:"type"`
	Time string `json:"time"`
	Job  string `json:"job"`
}

// Submitted is the launcher's submission of the job.
type Submitted struct {
	Header
	Command      []string `json:"command"`
	NNodes       int32    `json:"nnodes"`
	MinNodes     int32    `json:"minNodes"`
	NProcPerNode int32    `json:"nprocPerNode"`
	GPUsPerNode  int32    `json:"gpusPerNode"`
	MaxRestarts  int32    `json:"maxRestarts"`
}

// Waiting is a round's progress while it waits for nodes.
type Waiting struct {
	Header
	Round      int32    `json:"round"`
	Wanted     int32    `json:"wanted"`
	Ready      int32    `json:"ready"`
	Least      int32    `json:"least"`
	ReadyNodes []string `json:"readyNodes"` // the first ready nodes, at most 16
	Unusable   []string `json:"unusable"`   // why nodes cannot take part, at most 16
}

// RoundStarted is a round whose workers are being started.
type RoundStarted struct {
	Header
	Round          int32    `json:"round"`
	RoundID        string   `json:"roundId"`
	Nodes          []string `json:"nodes"` // by node rank
	NProcPerNode   int32    `json:"nprocPerNode"`
	WorldSize      int32    `json:"worldSize"`
	MasterAddr     string   `json:"masterAddr"`
	MasterPort     int32    `json:"masterPort"`
	UniqueIDSHA256 string   `json:"uniqueIdSha256"`
	RestartCount   int32    `json:"restartCount"`
}

// WorkerStarted is a rank's process started.
type WorkerStarted struct {
	Header
	Rank      int32  `json:"rank"`
	LocalRank int32  `json:"localRank"`
	Node      string `json:"node"`
	PID       int32  `json:"pid"`
	// Binding is where its GPUs sit, as its agent computed it; null from
	// an agent that computes none.
	Binding *Binding `json:"binding"`
}

// Binding is a worker's GPUs, their NUMA nodes, its CPUs (bound by its
// job's --cpu-bind mode when Applied, else those a numa binding would
// give), the NUMA nodes its memory prefers and the NIC nearest its first
// GPU; Unknown says why its node gives none.
type Binding struct {
	GPUs        []int32 `json:"gpus"`
	NUMANodes   []int32 `json:"numaNodes"`
	Mode        string  `json:"mode"` // "none", "numa", "socket" or "cores"
	CPUs        string  `json:"cpus"`
	CPUsNote    string  `json:"cpusNote"`
	Applied     bool    `json:"applied"`
	Threads     int32   `json:"threads"`
	MemoryNodes []int32 `json:"memoryNodes"`
	NIC         string  `json:"nic"`
	NICBy       string  `json:"nicBy"` // "switch", "numa" or ""
	Unknown     string  `json:"unknown"`
}

// WorkerExited is a rank's end: its exit code, or the signal that ended it
// (exitCode null then).
type WorkerExited struct {
	Header
	Rank       int32  `json:"rank"`
	LocalRank  int32  `json:"localRank"`
	Node       string `json:"node"`
	ExitCode   *int32 `json:"exitCode"`
	Signal     int32  `json:"signal"`
	SignalName string `json:"signalName"`
	// Stopped says muster stopped it (the job stopped or restarted).
	Stopped bool   `json:"stopped"`
	Error   string `json:"error"`
}

// NodeLost is a node of the job's round found lost.
type NodeLost struct {
	Header
	Node string `json:"node"`
	// DetectedBy is what told of the loss: gossip_dead, agent_gone,
	// session_expired, ... (named apart from a worker's signal); Cause says
	// it in words.
	DetectedBy string   `json:"detectedBy"`
	Cause      string   `json:"cause"`
	Observer   string   `json:"observer"` // the node whose agent saw it; "" for the store
	SilentMs   int64    `json:"silentMs"`
	Confirm    []string `json:"confirmedBy"`
	// WorkersGoneBy is when its workers are certainly gone; null when not in doubt.
	WorkersGoneBy *string `json:"workersGoneBy"`
}

// Restart is a round stopping for a new one.
type Restart struct {
	Header
	Round        int32  `json:"round"`
	Reason       string `json:"reason"`
	RestartCount int32  `json:"restartCount"`
	MaxRestarts  int32  `json:"maxRestarts"`
	// Counted is false for an elastic job's round that grows.
	Counted bool `json:"counted"`
}

// Ended is the job's end.
type Ended struct {
	Header
	State    string `json:"state"` // succeeded, failed, cancelled
	ExitCode int32  `json:"exitCode"`
	Summary  string `json:"summary"`
	// FailedRank is the first failed rank, null when none failed.
	FailedRank *int32 `json:"failedRank"`
	FailedNode string `json:"failedNode"`
	// Hang is who hung, when a hang failed the job; null otherwise.
	Hang *listing.Hang `json:"hang"`
	// PythonError is what the failed rank's Python raised (@record); null
	// otherwise.
	PythonError *listing.PythonError `json:"pythonError"`
}

// OutputLost is output dropped before the launcher read it.
type OutputLost struct {
	Header
	Events uint64 `json:"events"`
	Bytes  uint64 `json:"bytes"`
}

// StoreRestarted is a restarted store that took the job over.
type StoreRestarted struct {
	Header
	StoreID string `json:"storeId"`
}

// Writer appends a job's events to a file, a whole line per write, so that
// lines of launchers sharing the file never mix and a reader sees each line
// once it is written.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	name string
	err  error
	now  func() time.Time
}

// Open opens name for appending, creating it (0644) if need be. Another
// user may have put something at name first (a FIFO, a link, their own
// file): it opens nothing of theirs, and never waits for a FIFO's reader.
func Open(name string) (*Writer, error) {
	f, err := ownfile.OpenOutput(name, 0o644, os.Geteuid())
	if err != nil {
		return nil, fmt.Errorf("--events: %w", err)
	}
	return &Writer{f: f, name: name, now: time.Now}, nil
}

// Err is the first error writing the file; nothing is written after it.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}

// Submitted writes the submission of job.
func (w *Writer) Submitted(job string, spec *musterv1.JobSpec) {
	s := Submitted{Header: w.header(TypeSubmitted, job), Command: []string{}, NNodes: spec.GetNnodes(),
		MinNodes: spec.GetMinNodes(), NProcPerNode: spec.GetNproc(), GPUsPerNode: spec.GetGpus(), MaxRestarts: spec.GetMaxRestarts()}
	for _, a := range spec.GetArgv() {
		s.Command = append(s.Command, strings.ToValidUTF8(string(a), "\uFFFD"))
	}
	w.write(s)
}

// Event writes ev, if it is one of the lifecycle's; output and state
// changes are not.
func (w *Writer) Event(ev *musterv1.JobEvent) {
	if line := Line(ev, w.now); line != nil {
		w.write(line)
	}
}

// Line is the line for ev, nil for events the file leaves out; now stamps
// events that carry no time.
func Line(ev *musterv1.JobEvent, now func() time.Time) any {
	h := func(typ string) Header {
		t := now()
		if us := ev.GetTimeUnixUs(); us > 0 {
			t = time.UnixMicro(us)
		}
		return Header{Type: typ, Time: t.UTC().Format(TimeLayout), Job: ev.GetJobId()}
	}
	switch e := ev.GetEvent().(type) {
	case *musterv1.JobEvent_Waiting:
		p := e.Waiting
		return Waiting{Header: h(TypeWaiting), Round: p.GetRound(), Wanted: p.GetWanted(), Ready: p.GetReady(), Least: p.GetLeast(),
			ReadyNodes: nonNil(p.GetReadyNodes()), Unusable: nonNil(p.GetUnusable())}
	case *musterv1.JobEvent_RoundStarted:
		r := e.RoundStarted
		return RoundStarted{Header: h(TypeRoundStarted), Round: r.GetRound(), RoundID: r.GetRoundId(), Nodes: nonNil(r.GetNodes()),
			NProcPerNode: r.GetNproc(), WorldSize: r.GetWorldSize(), MasterAddr: r.GetMasterAddr(), MasterPort: r.GetMasterPort(),
			UniqueIDSHA256: r.GetUniqueIdSha256(), RestartCount: r.GetRestartCount()}
	case *musterv1.JobEvent_Started:
		s := e.Started
		out := WorkerStarted{Header: h(TypeWorkerStarted), Rank: s.GetRank(), LocalRank: s.GetLocalRank(), Node: s.GetNode(), PID: s.GetPid()}
		if b := s.GetBinding(); b != nil {
			out.Binding = &Binding{GPUs: nonNil(b.GetGpus()), NUMANodes: nonNil(b.GetNumaNodes()), Mode: cmp.Or(b.GetMode(), "none"),
				CPUs: b.GetCpus(), CPUsNote: b.GetCpusNote(), Applied: b.GetApplied(), Threads: b.GetThreads(),
				MemoryNodes: nonNil(b.GetMemoryNodes()), NIC: b.GetNic(), NICBy: b.GetNicBy(), Unknown: b.GetUnknown()}
		}
		return out
	case *musterv1.JobEvent_Exited:
		x := e.Exited
		out := WorkerExited{Header: h(TypeWorkerExited), Rank: x.GetRank(), LocalRank: x.GetLocalRank(), Node: x.GetNode(),
			Signal: x.GetSignal(), Stopped: x.GetStopped(), Error: x.GetError()}
		if x.GetSignal() != 0 {
			out.SignalName = unix.SignalName(unix.Signal(x.GetSignal()))
		} else if x.GetError() == "" {
			code := x.GetExitCode()
			out.ExitCode = &code
		}
		return out
	case *musterv1.JobEvent_NodeLost:
		l := e.NodeLost
		out := NodeLost{Header: h(TypeNodeLost), Node: l.GetNode(), DetectedBy: SignalName(l.GetSignal()), Cause: failure.Cause(l),
			Observer: l.GetObserver(), SilentMs: l.GetSilentMs(), Confirm: nonNil(l.GetConfirmedBy())}
		if ms := l.GetWorkersGoneByUnixMs(); ms > 0 {
			t := time.UnixMilli(ms).UTC().Format(TimeLayout)
			out.WorkersGoneBy = &t
		}
		return out
	case *musterv1.JobEvent_Restarting:
		r := e.Restarting
		return Restart{Header: h(TypeRestart), Round: r.GetRound(), Reason: r.GetReason(), RestartCount: r.GetRestartCount(),
			MaxRestarts: r.GetMaxRestarts(), Counted: r.GetCounted()}
	case *musterv1.JobEvent_Finished:
		f := e.Finished
		out := Ended{Header: h(TypeEnded), State: strings.ToLower(strings.TrimPrefix(f.GetState().String(), "JOB_STATE_")),
			ExitCode: f.GetExitCode(), Summary: f.GetSummary()}
		if x := f.GetFailure(); x != nil {
			rank := x.GetRank()
			out.FailedRank, out.FailedNode, out.Hang, out.PythonError = &rank, x.GetNode(), listing.HangOf(x), listing.PythonErrorOf(x)
		}
		return out
	case *musterv1.JobEvent_Lost:
		return OutputLost{Header: h(TypeOutputLost), Events: e.Lost.GetEvents(), Bytes: e.Lost.GetBytes()}
	case *musterv1.JobEvent_Restarted:
		return StoreRestarted{Header: h(TypeStoreRestarted), StoreID: e.Restarted.GetStoreId()}
	}
	return nil
}

// SignalName is a loss signal as the file spells it: "gossip_dead".
func SignalName(s musterv1.LossSignal) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "LOSS_SIGNAL_"))
}

// nonNil writes an empty list as [], not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (w *Writer) header(typ, job string) Header {
	return Header{Type: typ, Time: w.now().UTC().Format(TimeLayout), Job: job}
}

// write appends one line in one write(2): O_APPEND keeps it whole at the
// file's end, and it reaches the file before the next event is read.
func (w *Writer) write(v any) {
	line, err := json.Marshal(v)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	if err == nil {
		_, err = w.f.Write(append(line, '\n'))
	}
	if err != nil {
		w.err = fmt.Errorf("--events %s: %w", w.name, err)
	}
}
