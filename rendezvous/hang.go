package rendezvous

import (
	"fmt"
	"slices"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Bounds on what an agent may say of a hung worker, and on the waiting
// ranks the store names.
const (
	maxHungRanks   = 64
	maxWaitingList = 64
	maxHangPath    = 4 << 10
)

// checkHang accepts a worker's hang as its agent may tell it: bounded, and
// without the waiting ranks, which are the store's to say.
func checkHang(j *job, h *musterv1.WorkerHang) error {
	switch {
	case h == nil:
		return nil
	case len(h.GetAlsoHung()) > maxHungRanks:
		return fmt.Errorf("job %s: %d ranks hung at once in a report, more than %d", j.id, len(h.GetAlsoHung()), maxHungRanks)
	case len(h.GetFlightRecorder()) > maxHangPath:
		return fmt.Errorf("job %s: flight recorder path of %d bytes", j.id, len(h.GetFlightRecorder()))
	case len(h.GetWaiting()) > 0 || h.GetWaitingCount() != 0:
		return fmt.Errorf("job %s: an agent may not name the waiting ranks", j.id)
	case h.GetSilentMs() < 0 || h.GetTimeoutMs() < 0:
		return fmt.Errorf("job %s: negative hang durations", j.id)
	}
	return nil
}

// hungLocked fills in a hung worker's report with the ranks of its round
// that were waiting for it: those that still ran and were not found hung
// with it. The round's other nodes then dump PyTorch's flight recorders
// before they stop (StopJob.dump_first).
func (s *Store) hungLocked(j *job, ex *musterv1.WorkerExited) {
	h, r := ex.GetHang(), j.round
	if h == nil {
		return
	}
	r.dumpFirst = true
	count := int32(0)
	for rank := range r.worldSize {
		if rank == ex.GetRank() || r.exited[rank] || slices.Contains(h.GetAlsoHung(), rank) {
			continue
		}
		if count < maxWaitingList {
			h.Waiting = append(h.Waiting, rank)
		}
		count++
	}
	h.WaitingCount = count
}
