package rendezvous

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Bounds on what the store remembers of ended jobs: how many, and how many
// of each one's last events.
const (
	maxFinishedJobs = 1000
	finishedEvents  = 1000
)

// Jobs lists the jobs the store remembers, oldest first.
func (s *Store) Jobs() []*musterv1.JobStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*musterv1.JobStatus
	for _, id := range s.order {
		out = append(out, s.statusLocked(s.jobs[id]))
	}
	return out
}

// JobsChanged returns a channel closed at the next change of a job's state,
// nodes or round: read it before Jobs, so that no change goes unseen.
func (s *Store) JobsChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobsChanged
}

// Job is the job the store holds under id, or nil; with its round's
// started workers, which Jobs leaves out.
func (s *Store) Job(id string) *musterv1.JobStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil {
		return nil
	}
	st := s.statusLocked(j)
	workers := startedInOrder(j.round)
	if len(workers) > maxWorkersShown {
		st.WorkersLeftOut = int32(len(workers) - maxWorkersShown)
		workers = workers[:maxWorkersShown]
	}
	st.Workers = workers
	return st
}

// maxWorkersShown bounds the started workers a job's status lists.
const maxWorkersShown = 1024

// workerStarted records a worker's start in its round; a worker started
// again (a restarted node's) replaces its record.
func (r *round) workerStarted(st *musterv1.WorkerStarted) {
	if r.started == nil {
		r.started = map[int32]*musterv1.WorkerStarted{}
	}
	r.started[st.GetRank()] = st
}

// startedInOrder is r's started workers by rank.
func startedInOrder(r *round) []*musterv1.WorkerStarted {
	if r == nil {
		return nil
	}
	out := make([]*musterv1.WorkerStarted, 0, len(r.started))
	for _, rank := range slices.Sorted(maps.Keys(r.started)) {
		out = append(out, r.started[rank])
	}
	return out
}

// maxRoundsShown bounds the rounds a job's status lists (the last ones);
// JobStatus.rounds counts them all.
const maxRoundsShown = 32

// statusLocked is what the store says of j: to ListJobs, and to the job
// history once it ended.
func (s *Store) statusLocked(j *job) *musterv1.JobStatus {
	st := &musterv1.JobStatus{JobId: j.id, Spec: j.spec, State: j.state, Owner: j.owner,
		SubmittedUnixMs: unixMs(j.submitted), StartedUnixMs: unixMs(j.started), EndedUnixMs: unixMs(j.ended),
		Rounds: j.round.number + 1, Restarts: j.restarts, ExitCode: j.outcome.exitCode()}
	for _, n := range j.round.nodes {
		st.Nodes = append(st.Nodes, n.info.GetName())
	}
	for _, r := range j.ran {
		if r.Number == j.round.number {
			// A round taken over names its nodes as their agents come back.
			r = &musterv1.JobRound{Number: r.Number, StartedUnixMs: r.StartedUnixMs, Nodes: st.Nodes}
		}
		st.RoundNodes = append(st.RoundNodes, r)
	}
	if j.decided() {
		st.Summary, st.Failure = j.outcome.reason, j.outcome.failure
	}
	return st
}

// roundRanLocked notes that j's round started its workers on the named
// nodes.
func (s *Store) roundRanLocked(j *job, names []string) {
	now := s.now()
	if j.started.IsZero() {
		j.started = now
	}
	if len(j.ran) == maxRoundsShown {
		j.ran = slices.Delete(j.ran, 0, 1)
	}
	j.ran = append(j.ran, &musterv1.JobRound{Number: j.round.number, Nodes: names, StartedUnixMs: unixMs(now)})
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// pruneLocked forgets the oldest ended jobs past maxFinishedJobs.
func (s *Store) pruneLocked() {
	ended := 0
	for _, id := range s.order {
		if s.jobs[id].finished() {
			ended++
		}
	}
	keep := s.order[:0]
	for _, id := range s.order {
		if ended > maxFinishedJobs && s.jobs[id].finished() {
			delete(s.jobs, id)
			ended--
			continue
		}
		keep = append(keep, id)
	}
	s.order = keep
}

// Follow calls send for each of the job's events from version from on until
// the job's final event has been sent or ctx ends. With attach, the job is
// cancelled when the last attached follower leaves before it ends.
func (s *Store) Follow(ctx context.Context, jobID string, from uint64, attach bool, send func(*musterv1.JobEvent) error) error {
	s.mu.Lock()
	j := s.jobs[jobID]
	if j == nil {
		s.mu.Unlock()
		return fmt.Errorf("job %q: %w", jobID, ErrNotFound)
	}
	if attach {
		j.attached++
	}
	s.mu.Unlock()
	if attach {
		defer s.detach(j)
	}
	id := j.events.follow(from)
	defer j.events.unfollow(id)
	for {
		evs, lost, lostBytes, done, wake := j.events.read(from, 1024)
		if lost > 0 {
			if err := send(&musterv1.JobEvent{JobId: jobID, Event: &musterv1.JobEvent_Lost{Lost: &musterv1.OutputLost{Events: lost, Bytes: lostBytes}}}); err != nil {
				return err
			}
			from += lost
		}
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return err
			}
			from = ev.Version + 1
			// Room for publishers once the event is on its way to the follower.
			j.events.advance(id, from)
		}
		if done {
			return nil
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Store) detach(j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j.attached--
	if j.attached == 0 && j.finished() {
		j.events.trim(finishedEvents)
	}
	if j.attached == 0 && !j.finished() && s.leading {
		// A launcher that lost its connection follows again within moments:
		// only one that stays away has its job stopped.
		s.awaitLauncherLocked(j, s.cfg.DetachGrace)
	}
}

// awaitLauncherLocked stops j if no launcher follows it within d. Who
// follows is the leader's to know: its timer is not in the table, which
// every replica keeps alike, and its command applies without a record. A
// store that stops leading meanwhile fires it no more: its successor
// gives the launchers time of its own (Lead).
func (s *Store) awaitLauncherLocked(j *job, d time.Duration) {
	c := FireTimer{JobID: j.id, Timer: TimerLauncherGone, Deadline: s.clock().Add(d)}
	deposed := s.deposed
	time.AfterFunc(d, func() {
		select {
		case <-deposed:
		default:
			s.fire(&c)
		}
	})
}

// launcherGoneLocked stops j if no launcher follows it again.
func (s *Store) launcherGoneLocked(j *job, followed bool) {
	if followed {
		return
	}
	// 129, as if the launcher's terminal hung up.
	s.decideLocked(j, outcome{kind: cancelled, code: 129, reason: "stopped: the launcher that submitted it went away"})
	s.stopLocked(j, j.spec.KillTimeoutMs)
}

// defaultDetachGrace is how long a job waits for its launcher to follow it
// again after the launcher's stream ended, before it is stopped.
const defaultDetachGrace = 10 * time.Second

func fromUnixMs(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// AwaitFollowers waits, for at most d, until every job that has ended or
// is stopping has had its last events read by the launchers that follow
// it: a store that shuts down does not cut a job's end from its launcher.
func (s *Store) AwaitFollowers(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		var busy []*job
		for _, j := range s.jobs {
			if j.attached > 0 && (j.finished() || j.round.state == roundStopping) {
				busy = append(busy, j)
			}
		}
		changed := s.jobsChanged
		s.mu.Unlock()
		done := true
		for _, j := range busy {
			if !j.finished() || !j.events.drained() {
				done = false
			}
		}
		if done {
			return
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Millisecond):
		}
	}
}
