package rendezvous

import (
	"fmt"
	"slices"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// LogNodes names the nodes that ran any round of a job, in the order they
// first took one, by node rank: each keeps its ranks' output.
func (s *Store) LogNodes(jobID string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil {
		return nil, fmt.Errorf("job %q: %w", jobID, ErrNotFound)
	}
	return slices.Clone(j.ranOn), nil
}

// AskLogs sends the node named name a SendLogs command on its Watch
// stream; false when no agent of that name is connected to hear it.
func (s *Store) AskLogs(name string, cmd *musterv1.SendLogs) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.byName[name]
	if n == nil || !n.connected || n.placeholder {
		return false
	}
	s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_SendLogs{SendLogs: cmd}})
	return true
}

// SessionNode names the node of a registered session.
func (s *Store) SessionNode(session string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[session]
	if n == nil {
		return "", ErrNoSession
	}
	return n.info.GetName(), nil
}

// ranLocked notes the nodes of a round just formed among those that ran j.
func (j *job) ranLocked(nodes []*node) {
	if j.ranSet == nil || len(j.ranSet) != len(j.ranOn) {
		// Made again from the list (a restored table has only that).
		j.ranSet = make(map[string]bool, len(j.ranOn))
		for _, name := range j.ranOn {
			j.ranSet[name] = true
		}
	}
	for _, n := range nodes {
		if name := n.info.GetName(); !j.ranSet[name] {
			j.ranSet[name] = true
			j.ranOn = append(j.ranOn, name)
		}
	}
}
