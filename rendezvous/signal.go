package rendezvous

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// maxCoalesce bounds how long a signal request may ask to be taken as the
// same delivery as an earlier one.
const maxCoalesce = time.Minute

// Signal asks every node of the job's running round to send sig to each
// of its workers, and returns how many nodes it asked. With coalesce, a
// request for a signal sent within that long before is the same delivery
// (coalesced): each node of an agent run job may get the platform's signal.
func (s *Store) Signal(jobID string, sig int32, coalesce time.Duration) (nodes int, coalesced bool, err error) {
	if !jobspec.MayForward(sig) {
		return 0, false, fmt.Errorf("signal %d is not one muster forwards to workers (want one of %v)", sig, jobspec.ForwardableNames())
	}
	if coalesce < 0 || coalesce > maxCoalesce {
		return 0, false, fmt.Errorf("coalescing signals over %s: want 0 to %s", coalesce, maxCoalesce)
	}
	res, err := s.Apply(&SignalJob{JobID: jobID, Signal: sig, Coalesce: coalesce})
	return res.Nodes, res.Coalesced, err
}

func (s *Store) signalLocked(c *SignalJob) (nodes int, coalesced bool, err error) {
	jobID, sig, coalesce := c.JobID, c.Signal, c.Coalesce
	j := s.jobs[jobID]
	if j == nil {
		return 0, false, fmt.Errorf("job %q: %w", jobID, ErrNotFound)
	}
	r := j.round
	if j.finished() || r.state != roundRunning {
		why := "it ended"
		switch {
		case j.finished():
		case r.state == roundStopping:
			why = "its workers are stopping"
		default:
			why = "its workers have not started yet"
		}
		return 0, false, fmt.Errorf("job %s has no running workers to signal: %s", jobID, why)
	}
	now := c.At
	if last, ok := j.signalled[sig]; ok && coalesce > 0 && now.Sub(last) < coalesce {
		return 0, true, nil
	}
	if j.signalled == nil {
		j.signalled = map[int32]time.Time{}
	}
	j.signalled[sig] = now
	for _, n := range r.nodes {
		if _, live := s.nodes[n.session]; live {
			s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Signal{Signal: &musterv1.SignalJob{
				JobId: j.id, Signal: sig}}})
			nodes++
		}
	}
	s.log.Info("job signalled", zap.String("job", j.id), zap.String("signal", unix.SignalName(unix.Signal(sig))), zap.Int("nodes", nodes))
	return nodes, false, nil
}
