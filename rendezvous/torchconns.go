package rendezvous

import (
	"errors"
	"fmt"
	"net/netip"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// ErrNotStoreNode is an agent asking about connections to a job's TCPStore
// that it does not serve in that round.
var ErrNotStoreNode = errors.New("not the node that serves the job's TCPStore in this round")

// TorchConnNodes names, for each of ips, the nodes of job jobID's round
// roundID at that address, other than the node of session: the nodes the
// store asks who made connections to the job's TCPStore from there. Only
// the round's node rank 0, which serves the store, may ask; an address that
// is no other node's of the round has no names, unless some of the round's
// nodes have yet to register with a restarted store (ErrReporting).
func (s *Store) TorchConnNodes(session, jobID, roundID string, ips []netip.Addr) (map[netip.Addr][]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[session]
	if n == nil {
		return nil, ErrNoSession
	}
	j := s.jobs[jobID]
	if j == nil || j.finished() {
		return nil, fmt.Errorf("job %q: %w", jobID, ErrNotFound)
	}
	r := j.round
	if r == nil || r.id != roundID || len(r.nodes) == 0 || r.nodes[0] != n {
		return nil, fmt.Errorf("job %s, round %s, node %s: %w", jobID, roundID, n.info.GetName(), ErrNotStoreNode)
	}
	want := make(map[netip.Addr]bool, len(ips))
	for _, ip := range ips {
		want[ip.Unmap()] = true
	}
	names := map[netip.Addr][]string{}
	away := false
	for _, m := range r.nodes[1:] {
		if m.placeholder {
			away = true
			continue
		}
		ip, err := netip.ParseAddr(m.info.GetAddr())
		if err != nil || !want[ip.Unmap()] {
			continue
		}
		names[ip.Unmap()] = append(names[ip.Unmap()], m.info.GetName())
	}
	if away && len(names) < len(want) {
		// The address may be a node's that has yet to register again.
		return nil, fmt.Errorf("job %s: %w", jobID, ErrReporting)
	}
	return names, nil
}

// AskTorchConns sends the node named name a CheckTorchConns command on its
// Watch stream; false when no agent of that name is connected to hear it.
func (s *Store) AskTorchConns(name string, cmd *musterv1.CheckTorchConns) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.byName[name]
	if n == nil || !n.connected || n.placeholder {
		return false
	}
	s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_CheckTorchConns{CheckTorchConns: cmd}})
	return true
}
