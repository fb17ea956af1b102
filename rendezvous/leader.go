package rendezvous

import (
	"errors"

	"go.uber.org/zap"
)

// Leading. A replicated store (StoreConfig.Log) keeps its table on every
// replica, and one replica, the log's leader, acts on it: it sends the
// agents their commands, arms the jobs' timers, renews leases and finds
// lost nodes. Lead and StepDown move a replica between the two.
//
// A new leader cannot know when the old one last heard from each node:
// it counts every node's silence, and so its fence, from its own election,
// and waits the session grace for each agent to register with it again.
// No node is then lost, nor any rank started again, before that node's
// workers have certainly stopped themselves (lease.go).

var (
	// ErrNotLeader is a call that only the leader of a replicated store
	// takes, made to a replica that does not lead.
	ErrNotLeader = errors.New("this store replica does not lead")
	// ErrUnknownOutcome is a command whose leader was deposed before it was
	// known to be applied: it may have been.
	ErrUnknownOutcome = errors.New("outcome unknown")
)

// NotLeaderError is ErrNotLeader with where the leader is, when known.
type NotLeaderError struct {
	Leader string // the leader's store address; "" while there is none
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return ErrNotLeader.Error() + ", and no replica leads now (an election is under way, or too few replicas are up)"
	}
	return ErrNotLeader.Error() + "; the leader is " + e.Leader
}

func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// GetLeader is the leader's address, "" for a nil error or none known.
func (e *NotLeaderError) GetLeader() string {
	if e == nil {
		return ""
	}
	return e.Leader
}

// Leading says whether the store acts on its table.
func (s *Store) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// Deposed is closed when the store stops leading: streams served by it end.
func (s *Store) Deposed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deposed
}

// Lead makes the store act on its table: it arms the jobs' timers and
// awaits every node's agent, whose silence counts from now.
func (s *Store) Lead() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leading || s.closed {
		return
	}
	s.leading = true
	s.deposed = make(chan struct{})
	now := s.clock()
	s.began = now
	for _, n := range s.nodes {
		n.renewed, n.suspect, n.probed, n.probers = now, nil, now, 0
		s.awaitAgentLocked(n, "the store has a new leader")
	}
	for _, tm := range s.timers {
		s.armLocked(tm)
	}
	for _, j := range s.jobs {
		if !j.finished() {
			// Its launcher follows again from where it was, once it has
			// found this leader: a job none follows by then is stopped.
			j.events.expectFollower(firstFollowerWait)
			s.awaitLauncherLocked(j, s.cfg.DetachGrace+s.cfg.SessionGrace)
		}
	}
	s.log.Info("store leads", zap.Int("nodes", len(s.nodes)), zap.Int("jobs", len(s.jobs)), zap.Int("timers", len(s.timers)))
}

// StepDown makes the store keep its table without acting on it: its
// streams end, so that agents and launchers find the leader.
func (s *Store) StepDown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return
	}
	s.leading = false
	close(s.deposed)
	for _, tm := range s.timers {
		tm.disarmLocked()
	}
	if s.recheck != nil {
		s.recheck.Stop()
		s.recheck = nil
	}
	for _, n := range s.nodes {
		if n.lost != nil {
			n.lost.Stop()
			n.lost = nil
		}
		n.out.Take()
		closeOnce(n.gone)
	}
	s.log.Info("store follows its leader")
}
