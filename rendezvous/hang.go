package rendezvous

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/musterhq/muster/hangcause"
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

// hangGather bounds the wait for a round's nodes' clues to a hang: an agent
// asks NCCL's RAS within a few seconds, and when RAS names nobody it waits
// for PyTorch's flight recorders (at most 10 s) first.
const hangGather = 12 * time.Second

// hangInquiry is a round's hang being looked into: the clues its nodes
// gave, until all gave theirs, RAS named every rank it blamed, or
// hangGather passed.
type hangInquiry struct {
	clues map[int32]*musterv1.RankClues
	ras   []*musterv1.RasAnswer
	from  map[*node]bool
	// running are the round's ranks still running when it began.
	running []int32
	timer   *jobTimer
	// held is the first worker failure that came while it gathered.
	held *musterv1.WorkerExited
}

// checkHangClues accepts a node's clues as its agent may give them: about
// its own ranks, bounded.
func checkHangClues(j *job, n *node, hc *musterv1.HangClues) error {
	r := j.round
	nodeRank, ok := r.rank[n]
	switch {
	case !ok:
		return fmt.Errorf("job %s: hang clues from node %s, not one of the round's", j.id, n.info.GetName())
	case len(hc.GetRanks()) > int(r.nproc) || len(hc.GetRas().GetCulprits()) > int(r.nproc):
		return fmt.Errorf("job %s: hang clues of more ranks than node %s runs", j.id, n.info.GetName())
	case len(hc.GetRas().GetError()) > maxHangPath:
		return fmt.Errorf("job %s: RAS error of %d bytes", j.id, len(hc.GetRas().GetError()))
	}
	own := func(rank int32) bool { return rank >= 0 && rank < r.worldSize && nodeOf(rank, r.nproc) == nodeRank }
	for _, c := range hc.GetRanks() {
		if !own(c.GetRank()) {
			return fmt.Errorf("job %s: node %s gave clues of rank %d, not one of its own", j.id, n.info.GetName(), c.GetRank())
		}
		if len(c.GetRecorder()) > maxHungRanks || len(c.GetFlightRecorder()) > maxHangPath {
			return fmt.Errorf("job %s: rank %d's flight recorder clues are too large", j.id, c.GetRank())
		}
		for _, col := range c.GetRecorder() {
			if len(col.GetProcessGroup())+len(col.GetProcessGroupName())+len(col.GetOp())+len(col.GetState()) > maxHangPath {
				return fmt.Errorf("job %s: rank %d's flight recorder clues are too large", j.id, c.GetRank())
			}
		}
	}
	for _, c := range hc.GetRas().GetCulprits() {
		if !own(c.GetRank()) {
			return fmt.Errorf("job %s: node %s named rank %d for RAS, not one of its own", j.id, n.info.GetName(), c.GetRank())
		}
		if len(c.GetCommunicator())+len(c.GetOp()) > maxHangPath {
			return fmt.Errorf("job %s: RAS clues too large", j.id)
		}
	}
	return nil
}

// hangCluesLocked takes a node's clues to a hang of j's round: the first
// begins the inquiry, which asks every other node for its clues.
func (s *Store) hangCluesLocked(j *job, n *node, hc *musterv1.HangClues) {
	r := j.round
	if hc.GetRoundId() != r.id || r.state != roundRunning || j.decided() || r.restart {
		return
	}
	q := r.hang
	if q == nil {
		q = &hangInquiry{clues: map[int32]*musterv1.RankClues{}, from: map[*node]bool{}}
		for rank := range r.worldSize {
			if !r.exited[rank] {
				q.running = append(q.running, rank)
			}
		}
		r.hang = q
		for _, other := range r.nodes {
			if _, live := s.nodes[other.session]; live && other != n {
				s.sendLocked(other, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_CollectHangClues{
					CollectHangClues: &musterv1.CollectHangClues{JobId: j.id, RoundId: r.id}}})
			}
		}
		q.timer = s.afterLocked(hangGather, j, r, TimerHangVerdict)
	}
	if q.from[n] {
		return
	}
	q.from[n] = true
	for _, c := range hc.GetRanks() {
		q.clues[c.GetRank()] = c
	}
	if a := hc.GetRas(); a != nil {
		q.ras = append(q.ras, a)
	}
	if s.allCluesLocked(r) {
		s.hangVerdictLocked(j)
	}
}

// allCluesLocked says the verdict need wait no longer: every live node of
// the round gave its clues, a node found a rank's process stopped, or NCCL's
// RAS named ranks and every one of them was found on its node.
func (s *Store) allCluesLocked(r *round) bool {
	q := r.hang
	all := true
	for _, n := range r.nodes {
		if _, live := s.nodes[n.session]; live && !q.from[n] {
			all = false
		}
	}
	if all || slices.ContainsFunc(slices.Collect(maps.Values(q.clues)), (*musterv1.RankClues).GetStopped) {
		return true
	}
	named, found := 0, map[int32]bool{}
	for _, a := range q.ras {
		named = max(named, len(a.GetCulprits())+int(a.GetElsewhere()))
		for _, c := range a.GetCulprits() {
			found[c.GetRank()] = true
		}
	}
	return named > 0 && len(found) >= named
}

// hangVerdictLocked gives the verdict on j's round's hang with the clues
// there are, and fails (or restarts) the job for it; it says whether the
// job restarts.
func (s *Store) hangVerdictLocked(j *job) (restarted bool) {
	r := j.round
	q := r.hang
	if q == nil || j.decided() || r.restart {
		return false
	}
	s.stopTimerLocked(q.timer)
	q.timer = nil
	v := hangcause.Decide(hangcause.Round{NodeOf: func(rank int32) int32 { return nodeOf(rank, r.nproc) }, Ranks: q.clues, RAS: q.ras})
	named := v.GetCulprits()
	if v.GetCannotTell() {
		named = v.GetSilent()
	}
	var first int32
	if len(named) > 0 {
		first = named[0]
	} else if q.held != nil {
		first = q.held.GetRank()
	}
	ex := &musterv1.WorkerExited{Rank: first, LocalRank: first % r.nproc, Node: r.nodes[nodeOf(first, r.nproc)].info.GetName(),
		Signal: int32(unix.SIGABRT), Hang: &musterv1.WorkerHang{Verdict: v}}
	if c := q.clues[first]; c != nil {
		ex.Hang.SilentMs, ex.Hang.TimeoutMs, ex.Hang.NeverBeat, ex.Hang.FlightRecorder = c.GetSilentMs(), c.GetTimeoutMs(), c.GetNeverBeat(), c.GetFlightRecorder()
	}
	for _, rank := range q.running {
		if slices.Contains(named, rank) {
			continue
		}
		if len(ex.Hang.Waiting) < maxWaitingList {
			ex.Hang.Waiting = append(ex.Hang.Waiting, rank)
		}
		ex.Hang.WaitingCount++
	}
	s.log.Info("hang verdict", zap.String("job", j.id), zap.Stringer("evidence", v.GetEvidence()),
		zap.Int32s("culprits", v.GetCulprits()), zap.Bool("cannot-tell", v.GetCannotTell()))
	r.dumpFirst = v.GetEvidence() != musterv1.HangEvidence_HANG_EVIDENCE_NCCL_RAS
	// Silent ranks that nothing told apart are all aborted: each one's
	// stacks may tell the user what heartbeats could not.
	r.abortRanks = named
	return s.failedLocked(j, ex)
}

// culpritExitedLocked completes a hang's failure with its culprit's own
// end, which comes after the verdict: its stderr tail (its stacks).
func (s *Store) culpritExitedLocked(j *job, ex *musterv1.WorkerExited) {
	f := j.outcome.failure
	if f.GetHang().GetVerdict() == nil || f.GetRank() != ex.GetRank() || ex.GetHang() == nil {
		return
	}
	// Its agent aborted it for the verdict.
	f.StderrTail, f.Signal, f.ExitCode = ex.GetStderrTail(), ex.GetSignal(), ex.GetExitCode()
}
