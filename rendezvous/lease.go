package rendezvous

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Leases, fencing and confirmed losses.
//
// Every agent renews its node's lease with the store about once a second;
// an agent that has not renewed for FenceAfter stops its jobs' workers
// itself (agent/fence.go). So when the store loses a node it cannot be sure
// is dead, it knows when that node's workers are certainly gone (its last
// renewal plus FenceAfter) and starts no round of the node's jobs before
// then: no rank runs twice, even across a partition.
//
// Gossip saying a node is dead is a suspicion, not a loss. It becomes one
// when the node has also stopped renewing its lease (RenewSilence), and,
// should the store have lost many members at once (it is more likely the
// one cut off), only when another node's agent confirms it, or once the
// node has been silent for the fence bound: its workers are then gone
// whichever side was cut off.

const (
	// DefaultFenceAfter is the fence bound: long enough that a store
	// restarted, or a network that flapped, loses no running job.
	DefaultFenceAfter = 15 * time.Second
	// defaultRenewSilence is how long without a renewal makes a node
	// silent to the store when no node timeout is given; agents renew
	// every second.
	defaultRenewSilence = 3 * time.Second
	// recheckEvery is how often held suspicions are looked at again.
	recheckEvery = 250 * time.Millisecond
	// maxConfirmers bounds the names a loss carries of those who confirmed it.
	maxConfirmers = 8
)

// suspicion is gossip's word, or a peer's, that a registered node is dead,
// not yet taken as its loss.
type suspicion struct {
	since       time.Time
	silent      time.Duration       // gossip's time without an ack, when it said so
	byGossip    bool                // the store's own gossip member said so
	signal      musterv1.LossSignal // what said so first
	confirmedBy []string            // other nodes whose agents reported it
	held        bool                // logged as held, once
}

// Renew renews the session's node's lease.
func (s *Store) Renew(session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading || (s.cfg.Log != nil && !s.cfg.Log.Leads()) {
		// Only a leader backs a lease: a deposed one must not (leader.go).
		return ErrNotLeader
	}
	n := s.nodes[session]
	if n == nil {
		return fmt.Errorf("session %q: %w", session, ErrNoSession)
	}
	n.renewed = time.Now()
	if sp := n.suspect; sp != nil && time.Since(sp.since) >= s.cfg.RenewSilence {
		// It reached the store well after it was said dead.
		s.clearSuspicionLocked(n)
	}
	return nil
}

// FenceAfter is the store's fence bound, which it tells every agent.
func (s *Store) FenceAfter() time.Duration { return s.cfg.FenceAfter }

// probers is how many other nodes the store asks to probe a silent one.
const probers = 3

// watchSilence asks other nodes to probe each node with jobs whose agent
// has renewed no lease for the node timeout; their word that they cannot
// reach it either makes it a loss (ReportLoss). A lost node is so found
// within the node timeout whatever the cluster's size (gossip alone takes
// longer as members are added). It ends when the store closes.
func (s *Store) watchSilence() {
	t := time.NewTicker(recheckEvery)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		s.noteAloneLocked()
		s.probeSilentLocked()
		s.mu.Unlock()
	}
}

func (s *Store) probeSilentLocked() {
	if !s.leading {
		return
	}
	var silentNodes []*node
	for _, n := range s.nodes {
		if len(n.jobs) > 0 && time.Since(n.renewed) >= s.cfg.NodeTimeout && !n.probed.After(n.renewed) {
			silentNodes = append(silentNodes, n)
		}
	}
	if len(silentNodes) == 0 {
		return // the usual tick: nothing more to look at
	}
	var healthy []*node
	for _, n := range sortedNodes(s.nodes) {
		if n.connected && n.suspect == nil && time.Since(n.renewed) < s.cfg.NodeTimeout && n.info.GetName() != s.cfg.OwnNode {
			healthy = append(healthy, n)
		}
	}
	for _, n := range silentNodes {
		silent := time.Since(n.renewed)
		addr := s.liveness[n.info.GetName()].Addr
		if addr == "" {
			continue // not known to gossip: nothing to probe
		}
		n.probed = time.Now()
		asked := 0
		// The job's own nodes first: they are the ones that need it.
		for _, m := range slices.SortedFunc(slices.Values(healthy), func(a, b *node) int { return sharedJobs(b, n) - sharedJobs(a, n) }) {
			if asked == probers {
				break
			}
			if m == n {
				continue
			}
			asked++
			s.sendLocked(m, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_ProbePeer{ProbePeer: &musterv1.ProbePeer{
				Node: n.info.GetName(), Addr: addr}}})
		}
		n.probers = asked
		s.log.Info("node silent; peers asked to probe it", zap.String("node", n.info.GetName()),
			zap.Duration("silent", silent), zap.Int("peers", asked))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sharedJobs counts the jobs a and b both run.
func sharedJobs(a, b *node) int {
	k := 0
	for id := range a.jobs {
		if b.jobs[id] {
			k++
		}
	}
	return k
}

// suspectLocked records that n is said to be dead: by gossip (silent is
// how long it had no ack) or by the agent of node by.
func (s *Store) suspectLocked(n *node, byGossip bool, signal musterv1.LossSignal, silent time.Duration, by string) {
	if n.suspect == nil {
		n.suspect = &suspicion{since: time.Now(), signal: signal}
		s.log.Info("node suspected", zap.String("node", n.info.GetName()), zap.Bool("gossip", byGossip), zap.String("by", by))
	}
	sp := n.suspect
	sp.byGossip = sp.byGossip || byGossip
	sp.silent = max(sp.silent, silent)
	if by != "" && !slices.Contains(sp.confirmedBy, by) && len(sp.confirmedBy) < maxConfirmers {
		sp.confirmedBy = append(sp.confirmedBy, by)
	}
	s.settleSuspicionsLocked()
}

// clearSuspicionLocked drops what was said of n: gossip hears from it again.
func (s *Store) clearSuspicionLocked(n *node) {
	if n.suspect != nil {
		s.log.Info("node no longer suspected", zap.String("node", n.info.GetName()),
			zap.Duration("for", time.Since(n.suspect.since)))
		n.suspect = nil
	}
}

// suspectsItselfLocked says whether the store has lost contact with so many
// of its nodes at once that it is more likely the one cut off: at least two,
// and a third of those registered, suspected by gossip or silent.
func (s *Store) suspectsItselfLocked() bool {
	suspected, silent := 0, 0
	for _, n := range s.nodes {
		if n.suspect != nil {
			suspected++
		}
		if s.cfg.RenewSilence > 0 && time.Since(n.renewed) >= s.cfg.RenewSilence {
			silent++
		}
	}
	many := func(k int) bool { return k >= 2 && 3*k >= len(s.nodes) }
	return many(suspected) || many(silent)
}

// noteAloneLocked says whether the store suspects itself now, and records
// when such a spell ends.
func (s *Store) noteAloneLocked() bool {
	alone := s.suspectsItselfLocked()
	if s.alone && !alone {
		s.rejoined = time.Now()
		s.log.Info("the store reaches most of its nodes again; their silence counts from now")
	}
	s.alone = alone
	return alone
}

// settleSuspicionsLocked turns each suspicion that holds into the node's
// loss, and looks again later at those that do not hold yet.
func (s *Store) settleSuspicionsLocked() {
	if s.closed {
		return
	}
	alone := s.noteAloneLocked()
	pending := false
	for _, n := range sortedNodes(s.nodes) {
		sp := n.suspect
		if sp == nil {
			continue
		}
		storeSilent := time.Since(n.renewed)
		// A silence the store shares proves nothing: a node cut off with it
		// may need a few seconds more (TCP's backoff) to reach it again.
		heard := time.Since(later(n.renewed, s.rejoined))
		switch {
		case s.cfg.RenewSilence > 0 && storeSilent < s.cfg.RenewSilence,
			s.cfg.RenewSilence > 0 && !alone && heard < s.cfg.RenewSilence:
			// It still reaches the store: whoever lost it has a problem of
			// its own, or the node is slow, not gone.
			pending = true
		case alone && len(sp.confirmedBy) == 0 && storeSilent < s.cfg.FenceAfter:
			pending = true
			if !sp.held {
				sp.held = true
				s.log.Warn("node unreachable, with many others at once: the store suspects itself and fails no job for it",
					zap.String("node", n.info.GetName()), zap.Duration("silent", storeSilent))
			}
		case !sp.byGossip && len(sp.confirmedBy) == 0:
			pending = true
		case sp.signal == musterv1.LossSignal_LOSS_SIGNAL_SILENT && !sp.byGossip && len(sp.confirmedBy) < min(2, n.probers):
			// A probe crosses the silent node's own link: two must fail
			// where two were asked, lest one lossy path decide.
			pending = true
		default:
			signal, silent := sp.signal, sp.silent
			if sp.byGossip {
				signal = musterv1.LossSignal_LOSS_SIGNAL_GOSSIP_DEAD
			}
			if signal == musterv1.LossSignal_LOSS_SIGNAL_SILENT {
				silent = storeSilent
			}
			loss := failure.Loss(n.info.GetName(), signal, "", silent, "")
			loss.StoreSilentMs = storeSilent.Milliseconds()
			// Taken for the fence alone, with no other node's word: the
			// store itself was the one more likely cut off.
			loss.StoreCutOff = alone && len(sp.confirmedBy) == 0
			loss.ConfirmedBy = slices.Clone(sp.confirmedBy)
			s.proposeLocked(&RemoveNode{Session: n.session, Loss: loss, Renewed: n.renewed})
		}
	}
	if pending && s.recheck == nil {
		s.recheck = time.AfterFunc(recheckEvery, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.recheck = nil
			s.settleSuspicionsLocked()
		})
	}
}

// fenceLocked records when n's workers of j are certainly gone, now that n
// is lost for loss: the job's next round forms no earlier. It returns the
// loss, saying so when that time is still to come.
func (s *Store) fenceLocked(j *job, n *node, loss *musterv1.NodeLoss) *musterv1.NodeLoss {
	var by time.Time
	switch loss.GetSignal() {
	case musterv1.LossSignal_LOSS_SIGNAL_JOB_FORGOTTEN, musterv1.LossSignal_LOSS_SIGNAL_STORE_CLOSING:
		return loss // its workers are not running
	case musterv1.LossSignal_LOSS_SIGNAL_AGENT_GONE, musterv1.LossSignal_LOSS_SIGNAL_LEFT:
		// The agent's shim, or the agent leaving, stops them with the
		// job's grace.
		by = s.now().Add(time.Duration(j.spec.GetKillTimeoutMs())*time.Millisecond + s.fenceMargin())
	default:
		by = n.renewed.Add(s.cfg.FenceAfter + s.fenceMargin())
	}
	if !by.After(s.now()) {
		return loss
	}
	if by.After(j.fencedUntil) {
		j.fencedUntil = by
		j.fencedFor = fmt.Sprintf("node %s's workers to be certainly gone: %s", n.info.GetName(), failure.Cause(loss))
	}
	loss = proto.Clone(loss).(*musterv1.NodeLoss)
	loss.WorkersGoneByUnixMs = by.UnixMilli()
	return loss
}

// fenceMargin covers a renewal's flight and the two clocks' rates.
func (s *Store) fenceMargin() time.Duration { return min(time.Second, s.cfg.FenceAfter/10) }

// fencedLocked says whether j's waiting round must wait for the workers of
// an earlier round's lost nodes to be certainly gone, and has it formed
// again then.
func (s *Store) fencedLocked(j *job) bool {
	return s.holdRoundLocked(j, j.fencedUntil, &j.round.fenceTimer, TimerFence, "for a lost node's workers to be certainly gone")
}

// holdRoundLocked says whether j's waiting round must wait until until, and
// has it formed again then, by timer; why says what it waits for.
func (s *Store) holdRoundLocked(j *job, until time.Time, timer **jobTimer, t JobTimer, why string) bool {
	r := j.round
	wait := until.Sub(s.now())
	if wait <= 0 {
		return false
	}
	if *timer == nil {
		s.log.Info("round waits "+why, zap.String("job", j.id), zap.Int32("round", r.number), zap.Duration("wait", wait))
		*timer = s.afterLocked(wait, j, r, t)
	}
	return true
}
