package rendezvous

import (
	"time"
)

// The timers the store sets for jobs are part of its table: each is
// recorded with its deadline wherever the job's commands are applied, and
// armed only where the store leads (Lead arms those a new leader finds).
// Firing is a command, FireTimer, which names the timer by its job, round,
// kind and deadline: a timer fires once, even when two leaders in turn
// proposed it, and not at all once stopped.

// jobTimer is one timer the store set for a job.
type jobTimer struct {
	cmd FireTimer
	t   *time.Timer // armed, on the leader
}

type timerKey struct {
	job, round string
	timer      JobTimer
	deadline   int64
}

func keyOf(c *FireTimer) timerKey {
	return timerKey{job: c.JobID, round: c.RoundID, timer: c.Timer, deadline: c.Deadline.UnixNano()}
}

// afterLocked has the command for timer t of j (of its round r, when r is
// given) applied d from now: the one way the store sets a timer for a job.
func (s *Store) afterLocked(d time.Duration, j *job, r *round, t JobTimer) *jobTimer {
	tm := &jobTimer{cmd: FireTimer{JobID: j.id, Timer: t, Deadline: s.now().Add(d)}}
	if r != nil {
		tm.cmd.RoundID = r.id
	}
	s.timers[keyOf(&tm.cmd)] = tm
	if s.leading && !s.closed {
		s.armLocked(tm)
	}
	return tm
}

// armLocked starts a recorded timer's clock.
func (s *Store) armLocked(tm *jobTimer) {
	if tm.t != nil {
		return
	}
	c := tm.cmd
	tm.t = time.AfterFunc(c.Deadline.Sub(s.clock()), func() { s.fire(&c) })
}

// disarmLocked stops a timer's clock and keeps its record.
func (tm *jobTimer) disarmLocked() {
	if tm.t != nil {
		tm.t.Stop()
		tm.t = nil
	}
}

// stopTimerLocked stops a timer for good; nil is none.
func (s *Store) stopTimerLocked(tm *jobTimer) {
	if tm == nil {
		return
	}
	tm.disarmLocked()
	delete(s.timers, keyOf(&tm.cmd))
}

// timerFiredLocked takes the record of the timer c fires: false when there
// is none (stopped, or fired already).
func (s *Store) timerFiredLocked(c *FireTimer) bool {
	k := keyOf(c)
	tm := s.timers[k]
	if tm == nil {
		return false
	}
	tm.disarmLocked()
	delete(s.timers, k)
	return true
}

// fire proposes a timer's command once its clock ran out, saying whether a
// launcher follows the job then: whether one does is the leader's to know.
func (s *Store) fire(c *FireTimer) {
	s.mu.Lock()
	if j := s.jobs[c.JobID]; j != nil {
		c.Followed = j.attached > 0
	}
	if s.cfg.Log == nil {
		defer s.mu.Unlock()
		c.At = time.Time{}
		s.applyLocked(c)
		return
	}
	leading := s.leading
	s.mu.Unlock()
	if leading {
		s.Apply(c)
	}
}
