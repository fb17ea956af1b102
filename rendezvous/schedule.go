package rendezvous

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// The operator's schedule of nodes (launcher nodes cordon|drain|uncordon).
// A cordoned node takes no round of a job that never ran on it: new jobs go
// elsewhere, while the jobs already there keep running and may restart on
// it, as a cordoned Kubernetes node keeps its pods. A drained node takes no
// round at all: its jobs finish their round there and their next rounds
// form elsewhere. Neither stops a worker. The schedule is kept by node name,
// apart from the node's registration, so that an agent that registers again
// finds it as it was, and a node not registered can still be uncordoned.

// maxScheduled bounds the names the store keeps a schedule for.
const maxScheduled = 100_000

// SetNodeSchedule sets the operator's schedule of a node.
type SetNodeSchedule struct {
	Name     string
	Schedule musterv1.NodeSchedule
	At       time.Time
}

func (c *SetNodeSchedule) stamp() *time.Time { return &c.At }

// SetSchedule cordons, drains or uncordons the named node (by name, as
// launcher nodes lists it). It returns the node's schedule before and the
// jobs running on it, and refuses a node the store does not know.
func (s *Store) SetSchedule(name string, sched musterv1.NodeSchedule) (musterv1.NodeSchedule, []string, error) {
	if _, known := musterv1.NodeSchedule_name[int32(sched)]; !known {
		return 0, nil, fmt.Errorf("node %s: schedule %d is not one the store knows", name, sched)
	}
	s.mu.Lock()
	prev := s.schedule[name]
	s.mu.Unlock()
	if _, err := s.Apply(&SetNodeSchedule{Name: name, Schedule: sched}); err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var jobs []string
	if n := s.byName[name]; n != nil {
		for id := range n.jobs {
			jobs = append(jobs, id)
		}
		slices.Sort(jobs)
	}
	return prev, jobs, nil
}

func (s *Store) setScheduleLocked(c *SetNodeSchedule) error {
	prev, scheduled := s.schedule[c.Name]
	if s.byName[c.Name] == nil && !scheduled {
		return fmt.Errorf("node %q: %w (launcher nodes lists the registered nodes)", c.Name, ErrNotFound)
	}
	if prev == c.Schedule {
		return nil
	}
	if c.Schedule == musterv1.NodeSchedule_NODE_SCHEDULE_UNSPECIFIED {
		delete(s.schedule, c.Name)
	} else {
		if !scheduled && len(s.schedule) >= maxScheduled {
			return fmt.Errorf("node %q: %d nodes cordoned or drained already, the most the store keeps", c.Name, maxScheduled)
		}
		s.schedule[c.Name] = c.Schedule
	}
	s.log.Info("node schedule set", zap.String("node", c.Name), zap.String("schedule", ScheduleName(c.Schedule)),
		zap.String("was", ScheduleName(prev)))
	// Waiting rounds may form now, or say why they wait; an elastic job
	// may grow onto an uncordoned node.
	s.retryWaitingLocked()
	if n := s.byName[c.Name]; n != nil && c.Schedule == musterv1.NodeSchedule_NODE_SCHEDULE_UNSPECIFIED {
		s.growLocked(n)
	}
	return nil
}

// ScheduleName is how launcher nodes and the store's log name a schedule.
func ScheduleName(sched musterv1.NodeSchedule) string {
	switch sched {
	case musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED:
		return "cordoned"
	case musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED:
		return "drained"
	}
	return "schedulable"
}

// barred says why the operator's schedule keeps n from the rounds of p's
// job, "" when it does not.
func (p *placement) barred(n *node) string {
	name := n.info.GetName()
	switch p.schedule[name] {
	case musterv1.NodeSchedule_NODE_SCHEDULE_CORDONED:
		if p.ranOn != nil && slices.Contains(*p.ranOn, name) {
			return ""
		}
		return "node " + name + " is cordoned"
	case musterv1.NodeSchedule_NODE_SCHEDULE_DRAINED:
		return "node " + name + " is drained"
	}
	return ""
}

// scheduledOnlyLocked lists the nodes with a schedule that neither the
// store nor gossip lists otherwise: an operator must see a cordon before
// the node's agent comes back.
func (s *Store) scheduledOnlyLocked(listed []*musterv1.NodeStatus) []*musterv1.NodeStatus {
	seen := make(map[string]bool, len(listed))
	for _, st := range listed {
		seen[st.GetNode().GetName()] = true
	}
	var out []*musterv1.NodeStatus
	for name, sched := range s.schedule {
		if !seen[name] {
			out = append(out, &musterv1.NodeStatus{Node: &musterv1.Node{Name: name, Rank: -1}, NotRegistered: true, Schedule: sched})
		}
	}
	return out
}
