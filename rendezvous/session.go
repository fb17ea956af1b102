package rendezvous

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/musterhq/muster/failure"
	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Sessions. The store is soft state: a node's registration outlives its
// connection for SessionGrace, and its agent, registering again under the
// same name with the same node key, takes it back with its jobs. A store
// that never saw a job (it restarted) rebuilds it from the agents' reports:
// the job, its round, its owner and credential, the exits already
// acknowledged. Whatever the agents do not report is gone with the old
// store: the job's KV, events its followers had not read, stdin not yet
// delivered.

const (
	defaultSessionGrace = 10 * time.Second
	// adoptedAttachWait is how long a job a restarted store took over waits
	// for a launcher to follow it again before it is stopped, as a job whose
	// launcher went away is: longer than its launcher keeps trying to reach
	// the store (10 minutes), which may have come back elsewhere, where only
	// launcher attach finds it.
	adoptedAttachWait = 11 * time.Minute
	// maxReportedJobs bounds a registration's report.
	maxReportedJobs = 1024
	maxNodeKeyBytes = 256
)

var (
	// ErrNodeTaken is a registration under a name whose registration holds
	// jobs, without the node key it was registered with.
	ErrNodeTaken = errors.New("registered by another agent")
	// ErrBadEvents is a batch of events the store refused, whole.
	ErrBadEvents = errors.New("refused")
	// ErrNoSession is a call naming a session the store does not hold: its
	// agent must register again.
	ErrNoSession = errors.New("not registered (register again)")
)

// ID names this incarnation of the store; a restarted store has another.
func (s *Store) ID() string { return s.id }

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

func (s *Store) nodeByNameLocked(name string) *node { return s.byName[name] }

func newNode(session string, info *musterv1.Node, key string) *node {
	return &node{
		session:   session,
		info:      info,
		key:       key,
		connected: true,
		out:       newOutbox(),
		gone:      make(chan struct{}),
		busy:      map[int32]string{},
		jobs:      map[string]bool{},
		seqs:      map[string]uint64{},
	}
}

// Register adds a node and returns the session its Watch stream must name.
// key is the agent's node key and jobs what it reports running. The agent
// that registered a node (same name, same key) takes it back with its jobs;
// another agent may take over the name only while the node holds no jobs
// (it replaces the registration, as a restarted agent does). Jobs the store
// does not know are rebuilt from the report (the store restarted).
// torchStores are the jobs whose TCPStore the agent serves: those no job
// needs from it are released.
func (s *Store) Register(info *musterv1.Node, key string, jobs []*musterv1.RunningJob, torchStores []string) (string, error) {
	if err := validateNode(info); err != nil {
		return "", err
	}
	if len(key) > maxNodeKeyBytes {
		return "", fmt.Errorf("register: node key of %d bytes, more than %d", len(key), maxNodeKeyBytes)
	}
	if len(jobs) > maxReportedJobs || len(torchStores) > maxReportedJobs {
		return "", fmt.Errorf("register: %d jobs and %d TCPStores reported, more than %d", len(jobs), len(torchStores), maxReportedJobs)
	}
	c := &RegisterNode{Session: newID("s-"), Info: info, Key: key, Jobs: jobs, TorchStores: torchStores}
	if err := s.admit(c); err != nil {
		return "", err
	}
	res, err := s.Apply(c)
	return res.Session, err
}

// admit refuses a registration that would evict a live agent, and
// names the reported jobs the store has forgotten: what only the store
// that takes the registration knows, decided before it is a command.
func (s *Store) admit(c *RegisterNode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.nodeByNameLocked(c.Info.GetName()); old != nil && old.connected && len(old.jobs) == 0 && len(c.Jobs) == 0 &&
		(c.Key == "" || subtle.ConstantTimeCompare([]byte(c.Key), []byte(old.key)) != 1) {
		// Two live agents under one name would evict each other forever.
		return fmt.Errorf("node %s: %w, which is connected: give this agent another --name", c.Info.GetName(), ErrNodeTaken)
	}
	for _, rj := range c.Jobs {
		if s.forgotten[rj.GetJobId()] {
			c.Forgotten = append(c.Forgotten, rj.GetJobId())
		}
	}
	return nil
}

func (s *Store) registerLocked(c *RegisterNode) (string, error) {
	info, key, jobs, torchStores := c.Info, c.Key, c.Jobs, c.TorchStores
	if s.closed {
		return "", fmt.Errorf("store is closing")
	}
	if old := s.nodeByNameLocked(info.GetName()); old != nil {
		same := key != "" && subtle.ConstantTimeCompare([]byte(key), []byte(old.key)) == 1
		switch {
		case same:
			s.resumeLocked(old, info, jobs, c.Forgotten)
			s.releaseUnneededLocked(old, torchStores)
			return old.session, nil
		case len(old.jobs) > 0 || len(jobs) > 0:
			return "", fmt.Errorf("node %s: %w, which holds its jobs: only that agent may register it again", info.GetName(), ErrNodeTaken)
		}
		s.removeNodeLocked(old, failure.Loss(old.info.GetName(), musterv1.LossSignal_LOSS_SIGNAL_REPLACED, "", 0, ""))
	}
	if s.nodes[c.Session] != nil {
		return "", fmt.Errorf("session %s: registered already", c.Session)
	}
	n := newNode(c.Session, info, key)
	n.renewed = s.now()
	s.registeredLocked(info.GetName())
	s.nodes[n.session] = n
	s.byName[info.GetName()] = n
	s.log.Info("node registered", zap.String("node", info.GetName()), zap.String("addr", info.GetAddr()),
		zap.Int("gpus", len(info.GetGpus())), zap.Int("jobs", len(jobs)))
	for _, rj := range jobs {
		s.adoptLocked(n, rj, slices.Contains(c.Forgotten, rj.GetJobId()))
	}
	s.releaseUnneededLocked(n, torchStores)
	// A round waiting for nodes may form now, and an elastic job grow.
	s.retryWaitingLocked()
	s.growLocked(n)
	return n.session, nil
}

// Disconnected records that the Watch stream that got gone from Commands
// ended. A node without jobs goes at once; a node with jobs keeps them for
// the session grace, for its agent to come back.
func (s *Store) Disconnected(session string, gone <-chan struct{}, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[session]
	if n == nil || n.gone != gone || !s.leading {
		return // removed, taken back by a newer registration, or not this store's to decide
	}
	if n.leaving {
		// Its agent left: nothing to wait for.
		s.proposeLocked(&RemoveNode{Session: session, Loss: failure.Loss(n.info.GetName(), musterv1.LossSignal_LOSS_SIGNAL_LEFT, "", 0, reason), Renewed: n.renewed})
		return
	}
	busy := false
	for id := range n.jobs {
		if j := s.jobs[id]; j != nil && !j.finished() {
			busy = true
		}
	}
	if !busy {
		s.proposeLocked(&RemoveNode{Session: session, Loss: failure.Loss(n.info.GetName(), musterv1.LossSignal_LOSS_SIGNAL_SESSION_EXPIRED, "", 0, reason), Renewed: n.renewed})
		return
	}
	s.log.Warn("node disconnected; its jobs wait for it", zap.String("node", n.info.GetName()),
		zap.String("reason", reason), zap.Duration("grace", s.cfg.SessionGrace))
	s.awaitAgentLocked(n, reason)
	s.checkAgentGone(n, n.gone)
}

// awaitAgentLocked keeps n, whose agent has no stream to this store, for
// the session grace, for its agent to register again; n is lost after it.
func (s *Store) awaitAgentLocked(n *node, reason string) {
	n.connected = false
	closeOnce(n.gone)
	session, gone, grace := n.session, n.gone, s.cfg.SessionGrace
	if n.lost != nil {
		n.lost.Stop()
	}
	var expire func()
	expire = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || s.nodes[session] != n || n.connected || n.gone != gone {
			return
		}
		if s.suspectsItselfLocked() {
			// The store lost many nodes at once: it waits until it hears
			// from them or they are certainly gone.
			n.lost = time.AfterFunc(recheckEvery, expire)
			return
		}
		loss := failure.Loss(n.info.GetName(), musterv1.LossSignal_LOSS_SIGNAL_SESSION_EXPIRED, "", grace, reason)
		loss.StoreSilentMs = time.Since(n.renewed).Milliseconds()
		s.proposeLocked(&RemoveNode{Session: session, Loss: loss, Renewed: n.renewed})
	}
	n.lost = time.AfterFunc(grace, expire)
}

// resumeLocked gives a node back to the agent that registered it, and
// squares what the store holds with what the agent reports.
func (s *Store) resumeLocked(n *node, info *musterv1.Node, reports []*musterv1.RunningJob, forgotten []string) {
	if n.lost != nil {
		n.lost.Stop()
		n.lost = nil
	}
	closeOnce(n.gone) // ends the old Watch stream, if it still runs
	n.gone = make(chan struct{})
	// Commands queued meanwhile stay in the node's outbox for the new
	// stream. A replica's outbox is its leader's alone, so what it holds
	// decides nothing there: a second start of a job is ignored by agents.
	starting := map[string]bool{}
	if s.cfg.Log == nil {
		n.out.each(func(cmd *musterv1.AgentCommand) {
			if a := cmd.GetStart(); a != nil {
				starting[a.GetJobId()] = true
			}
		})
	}
	n.info, n.connected, n.renewed = info, true, s.now()
	s.log.Info("node registered again", zap.String("node", info.GetName()), zap.Int("jobs", len(reports)))
	reported := map[string]*musterv1.RunningJob{}
	for _, rj := range reports {
		reported[rj.GetJobId()] = rj
	}
	for _, id := range n.jobIDs() {
		j := s.jobs[id]
		if j == nil || j.finished() || !n.jobs[id] || reported[id] != nil || starting[id] {
			continue
		}
		switch {
		case j.state == musterv1.JobState_JOB_STATE_PENDING:
			if j.round.nodes[0] == n {
				// The request for ports may have been lost with the stream.
				s.reservePortsLocked(j)
			}
		case s.cfg.Log != nil && j.round.state == roundRunning && !s.allExitedLocked(j, n):
			// A replica's outbox goes with its leader: the node's assignment
			// may have been lost with it. Its agent, which reports every job
			// it holds until the store has its exits, never had it.
			if asgs, _, err := s.assignmentsLocked(j); err == nil {
				s.log.Info("sending a node its assignment again", zap.String("job", id), zap.String("node", n.info.GetName()))
				s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Start{Start: asgs[j.round.rank[n]]}})
			}
		case !s.allExitedLocked(j, n):
			s.nodeLostLocked(j, n, failure.Loss(n.info.GetName(), musterv1.LossSignal_LOSS_SIGNAL_JOB_FORGOTTEN, "", 0, ""))
		}
	}
	for _, rj := range reports {
		s.adoptLocked(n, rj, slices.Contains(forgotten, rj.GetJobId()))
	}
}

// Reported says whether the store holds a job a follower read from an
// earlier incarnation of it. Within the session grace of the store's start
// its agents may still report the job (ErrReporting); after it, a job
// nobody reported is gone (ErrNotFound), and a late report of it is refused,
// so that the launcher may submit it again without its running twice.
func (s *Store) Reported(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs[id] != nil {
		return nil
	}
	if s.now().Sub(s.began) < s.cfg.SessionGrace {
		return fmt.Errorf("job %q: %w", id, ErrReporting)
	}
	if len(s.forgotten) >= maxFinishedJobs {
		clear(s.forgotten)
	}
	s.forgotten[id] = true
	return fmt.Errorf("job %q: %w: the store restarted, and no agent reported the job", id, ErrNotFound)
}

// allExitedLocked says whether every rank of the job on n has exited.
func (s *Store) allExitedLocked(j *job, n *node) bool {
	for rank, m := range j.round.nodes {
		if m != n {
			continue
		}
		for l := int32(0); l < j.round.nproc; l++ {
			if !j.round.exited[globalRank(int32(rank), j.round.nproc, l)] {
				return false
			}
		}
	}
	return true
}

// stopReportedLocked tells an agent to stop a job it reported, which the
// store will not run.
func (s *Store) stopReportedLocked(n *node, rj *musterv1.RunningJob, reason string) {
	s.log.Warn("stopping a job an agent reported", zap.String("node", n.info.GetName()),
		zap.String("job", rj.GetJobId()), zap.String("reason", reason))
	s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Stop{Stop: &musterv1.StopJob{
		JobId: rj.GetJobId(), Reason: reason, KillTimeoutMs: rj.GetSpec().GetKillTimeoutMs()}}})
}

// validateReport checks what an agent says of a job before a store that
// never saw the job takes it over.
func validateReport(rj *musterv1.RunningJob) error {
	id := rj.GetJobId()
	switch {
	case !strings.HasPrefix(id, "j-") || len(id) > 64:
		return fmt.Errorf("job id %q is not one a store mints", id)
	case !strings.HasPrefix(rj.GetJobToken(), id+".") || len(rj.GetJobToken()) > 256:
		return fmt.Errorf("job %s: its credential is not one of its own", id)
	case rj.GetNnodes() < 1 || rj.GetNnodes() > jobspec.MaxNodes || rj.GetNproc() < 1 || rj.GetNproc() > jobspec.MaxNProc:
		return fmt.Errorf("job %s: %d nodes of %d workers", id, rj.GetNnodes(), rj.GetNproc())
	case rj.GetNodeRank() < 0 || rj.GetNodeRank() >= rj.GetNnodes():
		return fmt.Errorf("job %s: node rank %d of %d", id, rj.GetNodeRank(), rj.GetNnodes())
	case int64(rj.GetWorldSize()) != int64(rj.GetNnodes())*int64(rj.GetNproc()):
		return fmt.Errorf("job %s: world size %d is not %d nodes of %d workers", id, rj.GetWorldSize(), rj.GetNnodes(), rj.GetNproc())
	case len(rj.GetRanks()) > int(rj.GetNproc()) || len(rj.GetGpus()) > jobspec.MaxGPUs:
		return fmt.Errorf("job %s: %d ranks, %d GPUs reported", id, len(rj.GetRanks()), len(rj.GetGpus()))
	}
	if rj.GetSpec() == nil {
		return fmt.Errorf("job %s: no spec", id)
	}
	return validateSpec(rj.GetSpec())
}

// adoptLocked adds a reported job to n: a job the store knows gets its node
// back; one it never saw (it restarted) is rebuilt from the report.
func (s *Store) adoptLocked(n *node, rj *musterv1.RunningJob, forgotten bool) {
	id := rj.GetJobId()
	j := s.jobs[id]
	switch {
	case j == nil && (rj.GetStoreId() == s.id || forgotten):
		s.stopReportedLocked(n, rj, "the store no longer holds the job")
		return
	case j == nil:
		if err := validateReport(rj); err != nil {
			s.stopReportedLocked(n, rj, "the store cannot take the job over: "+err.Error())
			return
		}
		j = s.rebuildLocked(rj)
	case j.finished():
		reason := "the job already ended"
		if j.outcome.reason != "" {
			reason += ": " + j.outcome.reason
		}
		s.stopReportedLocked(n, rj, reason)
		return
	}
	rank := rj.GetNodeRank()
	r := j.round
	if int(rank) >= len(r.nodes) || rank < 0 || r.nproc != rj.GetNproc() || r.worldSize != rj.GetWorldSize() ||
		int32(len(r.nodes)) != rj.GetNnodes() || subtle.ConstantTimeCompare([]byte(j.token), []byte(rj.GetJobToken())) != 1 {
		s.stopReportedLocked(n, rj, "the node's report does not match the job")
		return
	}
	switch m := r.nodes[rank]; {
	case m == n:
	case m.placeholder:
		delete(r.rank, m)
		r.nodes[rank], r.rank[n] = n, rank
	default:
		s.stopReportedLocked(n, rj, fmt.Sprintf("node rank %d of the job is node %s", rank, m.info.GetName()))
		return
	}
	n.jobs[id] = true
	if r.stopSent && s.cfg.Log != nil {
		// The stop may have gone with a replica's leader: it is sent again.
		s.sendLocked(n, &musterv1.AgentCommand{Command: &musterv1.AgentCommand_Stop{Stop: &musterv1.StopJob{
			JobId: j.id, Reason: j.outcome.reason, KillTimeoutMs: r.stopGrace, DumpFirst: r.dumpFirst, AbortRanks: r.abortRanks}}})
	}
	j.ranLocked([]*node{n})
	for _, g := range rj.GetGpus() {
		n.busy[g] = id
	}
	n.seqs[id] = max(n.seqs[id], rj.GetAckedSeq())
	// Exits a store acknowledged are not sent again: record them here.
	for _, rs := range rj.GetRanks() {
		ex := rs.GetExited()
		if ex == nil || !rs.GetAcked() || nodeOf(ex.GetRank(), r.nproc) != rank || ex.GetRank() < 0 || j.finished() {
			continue
		}
		if !j.round.exited[ex.GetRank()] {
			if at := fromUnixMs(rs.GetExitedUnixMs()); j.rebuilt && at.After(j.lastExit) {
				j.lastExit = at
			}
			s.appendLocked(j, &musterv1.JobEvent{Event: &musterv1.JobEvent_Exited{Exited: ex}})
			s.workerExitedLocked(j, ex)
		}
	}
}

// rebuildLocked recreates a job a restarted store never saw, from one
// node's report; the other nodes fill their places as they register, or
// count as lost after the session grace.
func (s *Store) rebuildLocked(rj *musterv1.RunningJob) *job {
	j := &job{
		id:       rj.GetJobId(),
		spec:     rj.GetSpec(),
		events:   newEventLog(s.cfg.EventCount, s.cfg.EventBytes),
		owner:    rj.GetRunAs(),
		token:    rj.GetJobToken(),
		restarts: rj.GetRestartCount(),
		// The agent's word of when it started is better than none.
		started: fromUnixMs(rj.GetStartedUnixMs()),
		rebuilt: true,
	}
	r := &round{id: rj.GetRoundId(), number: rj.GetRoundNumber(), job: j, state: roundRunning,
		nproc: rj.GetNproc(), worldSize: rj.GetWorldSize(), exited: map[int32]bool{}, since: s.now(),
		rank: map[*node]int32{}}
	for i := int32(0); i < rj.GetNnodes(); i++ {
		// Its agent renewed its lease with the old store, before this one began.
		m := &node{placeholder: true, busy: map[int32]string{}, jobs: map[string]bool{}, renewed: s.now(),
			info: &musterv1.Node{Name: fmt.Sprintf("(node rank %d)", i)}}
		r.nodes = append(r.nodes, m)
		r.rank[m] = i
		r.gpus = append(r.gpus, nil)
	}
	j.round = r
	s.rounds[r.id] = r
	s.jobs[j.id] = j
	s.order = append(s.order, j.id)
	s.setJobStateLocked(j, musterv1.JobState_JOB_STATE_RUNNING)
	// Output waits for the launcher to follow again, as for a new job.
	j.events.expectFollower(firstFollowerWait)
	s.log.Warn("job taken over from its agents", zap.String("job", j.id), zap.Int32("nnodes", rj.GetNnodes()),
		zap.Int32("world-size", rj.GetWorldSize()))
	grace := s.cfg.SessionGrace
	s.afterLocked(grace, j, r, TimerNotBack)
	s.afterLocked(adoptedAttachWait, j, nil, TimerNoFollower)
	return j
}

// notBackLocked counts the nodes of a job taken over from its agents that
// did not register again within the session grace as lost.
func (s *Store) notBackLocked(j *job) {
	grace := s.cfg.SessionGrace
	for _, m := range j.round.nodes {
		if m.placeholder {
			loss := failure.Loss(m.info.GetName(), musterv1.LossSignal_LOSS_SIGNAL_NOT_BACK, "", grace, "")
			s.cfg.Recorder.NodeLost(loss)
			s.nodeLostLocked(j, m, loss)
		}
	}
}

// noFollowerLocked stops a job taken over from its agents that no launcher
// followed again.
func (s *Store) noFollowerLocked(j *job, followed bool) {
	if !followed {
		s.decideLocked(j, outcome{kind: cancelled, code: 129,
			reason: fmt.Sprintf("stopped: no launcher followed the job within %s of the store's restart (launcher attach follows a job again)", adoptedAttachWait)})
		s.stopLocked(j, j.spec.GetKillTimeoutMs())
	}
}
