package rendezvous

import (
	"fmt"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Every change to the job table is a Command, applied one at a time and in
// order by applyLocked, the store's one state machine. The public methods
// check their caller's input and mint what a command needs from outside the
// machine (IDs, the job's secret, the NCCL unique ID's magic, the time);
// every timer the store sets for a job fires a command; and the detectors of
// node loss (leases, gossip, sessions) hand their verdicts in as RemoveNode.
// Applying a store's log of commands to an empty store rebuilds its job
// table (TestReplayRebuildsTheJobTable): what a replicated store needs.
//
// A command's fields are plain values and protobuf messages, never channels
// or pointers into the store.
type Command interface{ isCommand() }

// SubmitJob adds a job and begins its first round.
type SubmitJob struct {
	JobID string
	// Token is the job's credential for its workers.
	Token string
	Spec  *musterv1.JobSpec
	// Owner is the local user the job runs as; nil for the cluster operator.
	Owner *musterv1.Identity
	At    time.Time
}

// PublishEvents records events an agent sent for its jobs (Publish).
type PublishEvents struct {
	Session  string
	FirstSeq uint64
	Events   []*musterv1.JobEvent
}

// CancelJob stops a job; Code is its exit code unless a worker failed first.
type CancelJob struct {
	JobID  string
	Force  bool
	Reason string
	Code   int32
}

// RestartJob ends a job's round and begins its next.
type RestartJob struct {
	JobID  string
	Reason string
}

// CompleteRound hands a round the ports its node rank 0 reserved, or why it
// could not; Magic is the first 8 bytes of the round's NCCL unique ID.
type CompleteRound struct {
	Session string
	RoundID string
	Ports   []int32
	Error   string
	Magic   uint64
}

// RecordHealth records a node's health check made for a round of a job.
type RecordHealth struct {
	Session string
	JobID   string
	RoundID string
	Health  *musterv1.NodeHealth
}

// SignalJob sends a signal to every worker of a job's running round.
type SignalJob struct {
	JobID    string
	Signal   int32
	Coalesce time.Duration
	At       time.Time
}

// RegisterNode adds a node, or gives it back to the agent that registered
// it, with the jobs and TCPStores that agent reports.
type RegisterNode struct {
	// Session names the node's session if it is new.
	Session     string
	Info        *musterv1.Node
	Key         string
	Jobs        []*musterv1.RunningJob
	TorchStores []string
}

// LeaveNode marks a node as leaving.
type LeaveNode struct {
	Session string
	Reason  string
}

// RemoveNode forgets a node for Loss, and ends or restarts its jobs.
type RemoveNode struct {
	Session string
	Loss    *musterv1.NodeLoss
}

// FireTimer is a timer the store set for a job, or for one of its rounds,
// firing. It does nothing once the job ended or, with RoundID, once that
// round is no longer the job's.
type FireTimer struct {
	JobID   string
	RoundID string
	Timer   JobTimer
}

func (*SubmitJob) isCommand()     {}
func (*PublishEvents) isCommand() {}
func (*CancelJob) isCommand()     {}
func (*RestartJob) isCommand()    {}
func (*CompleteRound) isCommand() {}
func (*RecordHealth) isCommand()  {}
func (*SignalJob) isCommand()     {}
func (*RegisterNode) isCommand()  {}
func (*LeaveNode) isCommand()     {}
func (*RemoveNode) isCommand()    {}
func (*FireTimer) isCommand()     {}

// JobTimer names the timers the store sets for a job or its round.
type JobTimer int

const (
	// TimerWaitDeadline ends a round's wait for nodes (--wait-timeout).
	TimerWaitDeadline JobTimer = iota + 1
	// TimerLastCall forms an elastic round with the nodes there are.
	TimerLastCall
	// TimerProgress sends a waiting round's progress that was held back.
	TimerProgress
	// TimerFence forms a round once a lost node's workers are surely gone.
	TimerFence
	// TimerBackoff forms a round once its restart's back-off has passed.
	TimerBackoff
	// TimerTimeout stops a job at its wall-clock limit (--timeout).
	TimerTimeout
	// TimerLauncherGone stops a job its launcher stopped following.
	TimerLauncherGone
	// TimerNotBack counts the nodes of a taken-over job that did not
	// register again as lost.
	TimerNotBack
	// TimerNoFollower stops a taken-over job no launcher followed again.
	TimerNoFollower
	// TimerHangVerdict gives the verdict on a round's hang with the clues
	// its nodes gave by then.
	TimerHangVerdict
)

func (t JobTimer) String() string {
	switch t {
	case TimerWaitDeadline:
		return "wait deadline"
	case TimerLastCall:
		return "last call"
	case TimerProgress:
		return "progress"
	case TimerFence:
		return "fence"
	case TimerBackoff:
		return "restart back-off"
	case TimerTimeout:
		return "timeout"
	case TimerLauncherGone:
		return "launcher gone"
	case TimerNotBack:
		return "nodes not back"
	case TimerNoFollower:
		return "no follower"
	case TimerHangVerdict:
		return "hang verdict"
	}
	return fmt.Sprintf("timer %d", int(t))
}

// Result is what applying a command tells its caller.
type Result struct {
	JobID   string // SubmitJob
	Session string // RegisterNode
	Round   int32  // RestartJob: the next round's number
	// CancelJob: the job's state when it had ended before the cancel.
	Ended musterv1.JobState
	Acked uint64 // PublishEvents: the highest sequence number applied
	// SignalJob: how many nodes were asked, or that an earlier delivery
	// stands for this one.
	Nodes     int
	Coalesced bool
}

// Apply applies one command to the store's state.
func (s *Store) Apply(c Command) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(c)
}

// applyLocked is the store's state machine: the one place a command enters.
// StoreConfig.Applied hears of each command applied without error.
func (s *Store) applyLocked(c Command) (Result, error) {
	var res Result
	var err error
	switch c := c.(type) {
	case *SubmitJob:
		res.JobID, err = s.submitLocked(c)
	case *PublishEvents:
		res.Acked, err = s.publishLocked(c)
	case *CancelJob:
		res.Ended, err = s.cancelJobLocked(c)
	case *RestartJob:
		res.Round, err = s.restartJobLocked(c)
	case *CompleteRound:
		err = s.completeRoundLocked(c)
	case *RecordHealth:
		err = s.recordHealthLocked(c)
	case *SignalJob:
		res.Nodes, res.Coalesced, err = s.signalLocked(c)
	case *RegisterNode:
		res.Session, err = s.registerLocked(c)
	case *LeaveNode:
		err = s.leaveLocked(c)
	case *RemoveNode:
		if n := s.nodes[c.Session]; n != nil {
			s.removeNodeLocked(n, c.Loss)
		}
	case *FireTimer:
		s.fireLocked(c)
	case *SetNodeSchedule:
		err = s.setScheduleLocked(c)
	default:
		err = fmt.Errorf("command %T: not one the store knows", c)
	}
	if err == nil && s.cfg.Applied != nil {
		s.cfg.Applied(c)
	}
	return res, err
}

// afterLocked has the command for timer t of j (of its round r, when r is
// given) applied d from now: the one way the store sets a timer for a job.
func (s *Store) afterLocked(d time.Duration, j *job, r *round, t JobTimer) *time.Timer {
	c := &FireTimer{JobID: j.id, Timer: t}
	if r != nil {
		c.RoundID = r.id
	}
	return time.AfterFunc(d, func() { s.Apply(c) })
}

// fireLocked applies a timer's command, only while the store is open, the
// job has not ended and the timer's round is still the job's: the one guard
// of every timer the store sets for a job.
func (s *Store) fireLocked(c *FireTimer) {
	j := s.jobs[c.JobID]
	if s.closed || j == nil || j.finished() || (c.RoundID != "" && j.round.id != c.RoundID) {
		return
	}
	r := j.round
	switch c.Timer {
	case TimerWaitDeadline:
		s.waitExpiredLocked(j, r, time.Duration(j.spec.WaitTimeoutMs)*time.Millisecond)
	case TimerLastCall:
		s.lastCallPassedLocked(j)
	case TimerProgress:
		if r.progressTimer != nil {
			r.progressTimer = nil
			if r.state == roundWaiting {
				s.progressLocked(j)
			}
		}
	case TimerFence:
		r.fenceTimer = nil
		s.tryFormLocked(j)
	case TimerBackoff:
		r.backoffTimer = nil
		s.tryFormLocked(j)
	case TimerTimeout:
		d := time.Duration(j.spec.TimeoutMs) * time.Millisecond
		s.cancelLocked(j, false, fmt.Sprintf("timed out after %s", d), 124)
	case TimerLauncherGone:
		s.launcherGoneLocked(j)
	case TimerNotBack:
		s.notBackLocked(j)
	case TimerNoFollower:
		s.noFollowerLocked(j)
	case TimerHangVerdict:
		s.hangVerdictLocked(j)
	default:
		s.refusedLocked(fmt.Errorf("job %s: %s: not a timer the store sets", j.id, c.Timer))
	}
}
