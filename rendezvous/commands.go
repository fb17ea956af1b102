package rendezvous

import (
	"fmt"
	"time"

	"go.uber.org/zap"

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
// or pointers into the store. Each carries its time, given where it was
// proposed: applying it reads no clock (codec.go carries commands across
// the replicated log).
type Command interface{ stamp() *time.Time }

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
	At       time.Time
}

// CancelJob stops a job; Code is its exit code unless a worker failed first.
type CancelJob struct {
	JobID  string
	Force  bool
	Reason string
	Code   int32
	At     time.Time
}

// RestartJob ends a job's round and begins its next.
type RestartJob struct {
	JobID  string
	Reason string
	At     time.Time
}

// CompleteRound hands a round the ports its node rank 0 reserved, or why it
// could not; Magic is the first 8 bytes of the round's NCCL unique ID.
type CompleteRound struct {
	Session string
	RoundID string
	Ports   []int32
	Error   string
	Magic   uint64
	At      time.Time
}

// RecordHealth records a node's health check made for a round of a job.
type RecordHealth struct {
	Session string
	JobID   string
	RoundID string
	Health  *musterv1.NodeHealth
	At      time.Time
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
	// Forgotten are reported jobs this store told their launcher it does
	// not hold: they are stopped, not taken over.
	Forgotten []string
	At        time.Time
}

// LeaveNode marks a node as leaving.
type LeaveNode struct {
	Session string
	Reason  string
	At      time.Time
}

// RemoveNode forgets a node for Loss, and ends or restarts its jobs.
type RemoveNode struct {
	Session string
	Loss    *musterv1.NodeLoss
	// Renewed is when the node's agent last renewed its lease, as the store
	// that found the loss saw it: the fence counts from it. Zero: when the
	// node last registered.
	Renewed time.Time
	At      time.Time
}

// FireTimer is a timer the store set for a job, or for one of its rounds,
// firing. It does nothing once the job ended or, with RoundID, once that
// round is no longer the job's.
type FireTimer struct {
	JobID   string
	RoundID string
	Timer   JobTimer
	// Deadline is when it was set to fire: with the rest, it names the
	// timer, which fires once (timers.go).
	Deadline time.Time
	// Followed says a launcher followed the job when the timer fired.
	Followed bool
	At       time.Time
}

func (c *SubmitJob) stamp() *time.Time     { return &c.At }
func (c *PublishEvents) stamp() *time.Time { return &c.At }
func (c *CancelJob) stamp() *time.Time     { return &c.At }
func (c *RestartJob) stamp() *time.Time    { return &c.At }
func (c *CompleteRound) stamp() *time.Time { return &c.At }
func (c *RecordHealth) stamp() *time.Time  { return &c.At }
func (c *SignalJob) stamp() *time.Time     { return &c.At }
func (c *RegisterNode) stamp() *time.Time  { return &c.At }
func (c *LeaveNode) stamp() *time.Time     { return &c.At }
func (c *RemoveNode) stamp() *time.Time    { return &c.At }
func (c *FireTimer) stamp() *time.Time     { return &c.At }

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

// Apply applies one command to the store's state, stamped with the time
// now when it has none. A replicated store proposes it to its log and
// answers once it is applied (StoreConfig.Log).
func (s *Store) Apply(c Command) (Result, error) {
	if at := c.stamp(); at.IsZero() {
		*at = s.clock()
	}
	if s.cfg.Log != nil {
		return s.cfg.Log.Propose(c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(c)
}

// ApplyCommitted applies a command the replicated log committed: the one
// way commands enter a replicated store.
func (s *Store) ApplyCommitted(c Command) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(c)
}

// proposeLocked has a verdict the store reached outside any command (a
// detector's, a full outbox's) applied: at once by a lone store, through
// the log by a replicated one, which the leader alone does.
func (s *Store) proposeLocked(c Command) {
	if s.cfg.Log == nil {
		s.applyLocked(c)
		return
	}
	if !s.leading {
		return
	}
	*c.stamp() = s.clock()
	go func() {
		if _, err := s.cfg.Log.Propose(c); err != nil {
			s.log.Info("store command not applied", zap.String("command", fmt.Sprintf("%T", c)), zap.Error(err))
		}
	}()
}

// applyLocked is the store's state machine: the one place a command enters.
// While it applies, the store's time is the command's (now).
// StoreConfig.Applied hears of each command applied without error.
func (s *Store) applyLocked(c Command) (Result, error) {
	if at := c.stamp(); at.IsZero() {
		*at = s.clock()
	}
	prev := s.at
	s.at = *c.stamp()
	defer func() { s.at = prev }()
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
			if !c.Renewed.IsZero() {
				n.renewed = c.Renewed
			}
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

// now is the store's time: the applied command's, or the clock's outside
// a command (detectors, leases, which are the leader's alone).
func (s *Store) now() time.Time {
	if !s.at.IsZero() {
		return s.at
	}
	return s.clock()
}

// fireLocked applies a timer's command, only while the store is open, the
// job has not ended and the timer's round is still the job's: the one guard
// of every timer the store sets for a job.
func (s *Store) fireLocked(c *FireTimer) {
	if !s.timerFiredLocked(c) && c.Timer != TimerLauncherGone {
		return // stopped, or fired already; the launcher's is never recorded (detach)
	}
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
		s.launcherGoneLocked(j, c.Followed)
	case TimerNotBack:
		s.notBackLocked(j)
	case TimerNoFollower:
		s.noFollowerLocked(j, c.Followed)
	case TimerHangVerdict:
		s.hangVerdictLocked(j)
	default:
		s.refusedLocked(fmt.Errorf("job %s: %s: not a timer the store sets", j.id, c.Timer))
	}
}
