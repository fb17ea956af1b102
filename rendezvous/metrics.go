package rendezvous

import (
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Recorder hears of the store's events that metrics count, each where the
// store decides it, under the store's lock: its methods must not block.
// Package metrics implements it; StoreConfig.Recorder nil hears nothing.
type Recorder interface {
	// JobFinished: a job ended, with its result (JobResult).
	JobFinished(result string)
	// RoundRestarted: a job's round is stopping for its next one.
	RoundRestarted()
	// NodeLost: a node was removed from the store (its cause by
	// failure.LossCause), the store's closing aside.
	NodeLost(loss *musterv1.NodeLoss)
	// WorkerExited: a worker's exit reached the store.
	WorkerExited(ex *musterv1.WorkerExited)
	// JobStarted: a job's first round began running, after waited since
	// its submission.
	JobStarted(waited time.Duration)
	// RoundFormed: a round began running, took from its start (waiting
	// for nodes, reserving ports) to then.
	RoundFormed(took time.Duration)
}

// noRecorder is the Recorder of a store given none.
type noRecorder struct{}

func (noRecorder) JobFinished(string)                  {}
func (noRecorder) RoundRestarted()                     {}
func (noRecorder) NodeLost(*musterv1.NodeLoss)         {}
func (noRecorder) WorkerExited(*musterv1.WorkerExited) {}
func (noRecorder) JobStarted(time.Duration)            {}
func (noRecorder) RoundFormed(time.Duration)           {}

// The results of an ended job, as JobFinished names them.
const (
	ResultSucceeded    = "succeeded"
	ResultWorkerFailed = "worker_failed"
	ResultNodeLost     = "node_lost"
	ResultCancelled    = "cancelled"
	ResultNotRun       = "not_run"
)

// result names the outcome's kind for Recorder.JobFinished.
func (o outcome) result() string {
	switch o.kind {
	case workerFailed:
		return ResultWorkerFailed
	case nodeLost:
		return ResultNodeLost
	case cancelled:
		return ResultCancelled
	case notRun:
		return ResultNotRun
	}
	return ResultSucceeded
}

// The states of a registered node, as Stats counts them; the first that
// applies wins.
const (
	NodeLeaving      = "leaving"      // its agent said it shuts down
	NodeSuspect      = "suspect"      // its death was said, not yet taken as its loss
	NodeDisconnected = "disconnected" // its stream broke; it keeps its jobs for the session grace
	NodeDraining     = "draining"     // drained by the operator, its jobs still running
	NodeDrained      = "drained"      // drained by the operator, no job left
	NodeCordoned     = "cordoned"     // cordoned by the operator
	NodeBusy         = "busy"         // it runs jobs
	NodeIdle         = "idle"
)

// NodeStates lists every node state Stats counts, so that a state with no
// node reads 0 rather than missing.
var NodeStates = []string{NodeIdle, NodeBusy, NodeDisconnected, NodeSuspect, NodeLeaving, NodeCordoned, NodeDraining, NodeDrained}

// NodeGPUs is a registered node's GPUs.
type NodeGPUs struct {
	Name        string
	Total, Free int
}

// Stats is what the store holds now, for metrics read at scrape time.
type Stats struct {
	// Nodes counts registered nodes by state (NodeStates).
	Nodes map[string]int
	// GPUs lists every registered node's GPUs.
	GPUs []NodeGPUs
	// Jobs counts the jobs the store remembers by state.
	Jobs map[musterv1.JobState]int
}

// Stats counts what the store holds now; it takes the store's lock once and
// walks each node and job once.
func (s *Store) Stats() Stats {
	st := Stats{Nodes: make(map[string]int, len(NodeStates)), Jobs: map[musterv1.JobState]int{}}
	for _, name := range NodeStates {
		st.Nodes[name] = 0
	}
	s.mu.Lock()
	st.GPUs = make([]NodeGPUs, 0, len(s.nodes))
	for _, n := range s.nodes {
		st.Nodes[nodeState(n, s.schedule[n.info.GetName()])]++
		total := len(n.info.GetGpus())
		st.GPUs = append(st.GPUs, NodeGPUs{Name: n.info.GetName(), Total: total, Free: total - len(n.busy)})
	}
	for _, j := range s.jobs {
		st.Jobs[j.state]++
	}
	s.mu.Unlock()
	return st
}

func nodeState(n *node, sched musterv1.NodeSchedule) string {
	switch {
	case n.leaving:
		return NodeLeaving
	case n.suspect != nil:
		return NodeSuspect
	case !n.connected:
		return NodeDisconnected
	case sched == musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED && len(n.jobs) > 0:
		return NodeDraining
	case sched == musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED:
		return NodeDrained
	case sched == musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED:
		return NodeCordoned
	case len(n.jobs) > 0:
		return NodeBusy
	}
	return NodeIdle
}
