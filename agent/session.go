package agent

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/jobspec"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// The agent's session with the store. A lost Watch stream (the store
// restarted, the network broke) does not end the agent, nor its jobs: it
// registers again, with backoff, reporting the jobs it runs, and the store
// keeps them or, restarted, rebuilds them from the reports. The agent never
// gives up: a node daemon has nothing better to do than wait for its store.
// Its jobs' workers, though, it stops once it has not reached the store for
// the fence bound (fence.go). The store, on its side, fails a job whose node
// has not come back within its session grace; the agent then learns it
// when it registers again and stops the job.

// Bounds on reconnecting: the delay between tries grows from reconnectMin
// to reconnectMax; each registration may take registerTimeout; a failing
// store is logged at every try for the first few, then every logEvery.
const (
	reconnectMin    = 100 * time.Millisecond
	reconnectMax    = 5 * time.Second
	registerTimeout = 10 * time.Second
	// electingRetry bounds the wait between tries while a replicated
	// store's replicas elect a leader.
	electingRetry = 300 * time.Millisecond
	// replicaRegisterTimeout bounds a registration with one replica of a
	// replicated store, which has others to try.
	replicaRegisterTimeout = 3 * time.Second
	logEvery               = 30 * time.Second
)

func newNodeKey() string {
	var b [32]byte
	if _, err := cryptorand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// sessionID is the current registration's session.
func (a *Agent) sessionID() string {
	a.smu.Lock()
	defer a.smu.Unlock()
	return a.session
}

// currentStore names the store incarnation of the current registration.
func (a *Agent) currentStore() string {
	a.smu.Lock()
	defer a.smu.Unlock()
	return a.storeID
}

// storeAddrNow is the store's address now.
func (a *Agent) storeAddrNow() string {
	a.smu.Lock()
	defer a.smu.Unlock()
	return a.storeAddr
}

// MoveStore follows the store to addr, another node's, when the one the
// agent knew is gone (its head node died): the agent registers there,
// reporting its jobs, which that store takes over as a restarted store
// would. Jobs are kept only if that happens within the fence bound.
func (a *Agent) MoveStore(addr string) error {
	a.smu.Lock()
	old := a.storeAddr
	if old == addr {
		a.smu.Unlock()
		return nil
	}
	a.storeAddr = addr
	a.smu.Unlock()
	if err := a.client.Move(addr); err != nil {
		return err
	}
	a.log.Warn("the store moved; registering with it there", zap.String("from", old), zap.String("store", addr), zap.Int("jobs", a.jobCount()))
	return nil
}

// StoreSilentFor is how long the store has not answered this agent.
func (a *Agent) StoreSilentFor() time.Duration {
	a.lease.mu.Lock()
	defer a.lease.mu.Unlock()
	return time.Since(a.lease.ok)
}

// register registers the node with what it runs and opens its Watch stream;
// it returns once the stream is in place. stop ends the stream.
func (a *Agent) register(ctx context.Context) (watch musterv1.Agents_WatchClient, stop context.CancelFunc, err error) {
	timeout := registerTimeout
	if a.client.Replicated() {
		// A replica cut off answers nothing: the next one is tried soon
		// enough for the agent to reach a leader well within the fence.
		timeout = replicaRegisterTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	sent := time.Now()
	reg, err := a.client.Register(rctx, &musterv1.RegisterRequest{Node: a.node, NodeKey: a.key, Jobs: a.report(),
		TorchStores: a.torchStoreJobs()})
	cancel()
	if err != nil {
		return nil, nil, err
	}
	wctx, stop := context.WithCancel(a.ctx)
	watch, err = a.client.Watch(wctx, &musterv1.WatchRequest{Session: reg.GetSession()})
	if err == nil {
		// The store sends the stream's header once it serves it.
		t := time.AfterFunc(timeout, stop)
		_, err = watch.Header()
		if !t.Stop() && err == nil {
			err = errors.New("watch stream: no answer")
		}
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	a.smu.Lock()
	a.session, a.storeID = reg.GetSession(), reg.GetStoreId()
	a.smu.Unlock()
	a.client.LearnReplicas(reg.GetStoreReplicas())
	a.connected.Store(true)
	a.lease.renewed(sent, time.Duration(reg.GetFenceAfterMs())*time.Millisecond)
	return watch, stop, nil
}

// registerLeader registers with the store; with a replicated one, a
// replica that does not lead names the leader, which the client follows at
// once, and one that names none (an election is under way) or cannot be
// reached has the agent try the next replica at its next try.
func (a *Agent) registerLeader(ctx context.Context) (musterv1.Agents_WatchClient, context.CancelFunc, error) {
	watch, stop, err := a.register(ctx)
	if err != nil {
		a.client.FollowLeader(err)
	}
	if addr := a.client.StoreAddr(); addr != "" {
		a.smu.Lock()
		a.storeAddr = addr
		a.smu.Unlock()
	}
	return watch, stop, err
}

// electing says whether err leaves the agent waiting for a replicated
// store's leader: it has no leader yet, or the replica tried is down.
func (a *Agent) electing(err error) bool {
	if _, refused := storeclient.LeaderOf(err); refused {
		return true
	}
	// Aborted: a leader deposed before it answered; DeadlineExceeded: a
	// replica cut off. Registering again is safe: the next replica is tried.
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded:
		return a.client.Replicated()
	}
	return false
}

// sessionLoop serves Watch streams, registering again whenever one ends,
// until the agent closes.
func (a *Agent) sessionLoop(watch musterv1.Agents_WatchClient, stop context.CancelFunc) {
	defer a.loops.Done()
	for {
		// A stream left at an address the client moved from (the store's
		// leader changed, or the store moved) may hang there: it is ended.
		moved, served := a.client.Moved(), make(chan struct{})
		go func() {
			select {
			case <-moved:
				stop()
			case <-served:
			}
		}()
		err := a.serve(watch)
		close(served)
		a.connected.Store(false)
		stop()
		// A stream's commands are done before the agent registers again,
		// reporting its jobs, or ends.
		a.cmds.Wait()
		if a.ctx.Err() != nil {
			return
		}
		a.log.Warn("lost the store; this node's jobs keep running while the agent registers again",
			zap.String("store", a.storeAddrNow()), zap.Int("jobs", a.jobCount()), zap.String("error", storeclient.ErrorMessage(err)))
		if watch, stop = a.reconnect(); watch == nil {
			return
		}
	}
}

// reconnect registers again with backoff until it succeeds or the agent
// closes (then it returns nil).
func (a *Agent) reconnect() (musterv1.Agents_WatchClient, context.CancelFunc) {
	delay, since, logged := reconnectMin, time.Now(), time.Time{}
	for try := 1; ; try++ {
		// Jitter keeps many agents of a restarted store from coming at once.
		wait := delay/2 + rand.N(delay/2+1)
		t := time.NewTimer(wait)
		select {
		case <-a.ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		watch, stop, err := a.registerLeader(a.ctx)
		if err == nil {
			a.log.Info("registered with the store again", zap.String("store", a.storeAddrNow()),
				zap.Int("tries", try), zap.Duration("down-for", time.Since(since).Round(time.Millisecond)), zap.Int("jobs", a.jobCount()))
			return watch, stop
		}
		if a.ctx.Err() != nil {
			return nil, nil
		}
		delay = min(2*delay, reconnectMax)
		if a.electing(err) {
			// Replicas elect a leader within a second or two: tries stay
			// close, so that the agent finds it soon after.
			delay = min(delay, electingRetry)
		}
		if try <= 3 || time.Since(logged) >= logEvery {
			logged = time.Now()
			msg := "store unreachable; trying again"
			if status.Code(err) == codes.PermissionDenied {
				msg = "store refuses to register this node; trying again"
			}
			a.log.Warn(msg, zap.String("store", a.storeAddrNow()), zap.Int("tries", try),
				zap.Duration("down-for", time.Since(since).Round(time.Second)), zap.Duration("next-try-within", delay),
				zap.String("error", storeclient.ErrorMessage(err)))
		}
	}
}

func (a *Agent) jobCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.jobs)
}

// report is what the agent tells the store of its jobs when it registers:
// enough for a store that never saw them to finish them.
func (a *Agent) report() []*musterv1.RunningJob {
	a.mu.Lock()
	runs := make([]*jobRun, 0, len(a.jobs))
	for _, r := range a.jobs {
		runs = append(runs, r)
	}
	a.mu.Unlock()
	out := make([]*musterv1.RunningJob, 0, len(runs))
	for _, r := range runs {
		asg := r.asg
		acked := r.pub.ackedSeq()
		out = append(out, &musterv1.RunningJob{
			JobId:         asg.GetJobId(),
			RoundId:       asg.GetRoundId(),
			RoundNumber:   asg.GetRoundNumber(),
			RestartCount:  asg.GetRestartCount(),
			Spec:          asg.GetSpec(),
			NodeRank:      asg.GetNodeRank(),
			Nnodes:        asg.GetNnodes(),
			Nproc:         asg.GetNproc(),
			WorldSize:     asg.GetWorldSize(),
			Gpus:          asg.GetGpus(),
			RunAs:         asg.GetRunAs(),
			JobToken:      asg.GetJobToken(),
			Ranks:         r.sup.rankStates(int32(jobspec.GlobalRank(int(asg.GetNodeRank()), int(asg.GetNproc()), 0)), asg.GetNproc(), acked),
			AckedSeq:      acked,
			StoreId:       r.storeID,
			StartedUnixMs: r.since.UnixMilli(),
		})
	}
	return out
}
