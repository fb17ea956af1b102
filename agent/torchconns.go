package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storewire"
)

// A connection to a job's TCPStore from another of the job's nodes comes
// from an address any user of that node may connect from. The agent that
// serves the store asks that node's agent, through the store, who made it:
// the node's agent looks up the socket with the connection's two ends in
// its own kernel (sock_diag) and says whether the job's user there owns
// it. Until it has said so, the connection is not served a byte.

// Bounds on asking.
const (
	// torchCheckWait bounds how long a connection from another node waits
	// for its node's word, retries through a store that is away included;
	// without it, the connection is refused.
	torchCheckWait = 15 * time.Second
	// torchAnswerTimeout bounds sending a node's answer to the store.
	torchAnswerTimeout = 5 * time.Second
)

// torchConnChecker asks, for one job's TCPStore, who made its connections
// from the job's other nodes: in batches, one question at a time for each
// node, so that thousands of ranks connecting at once make a few questions,
// not thousands, and a node slow to answer delays no other node's ranks.
// Each connection's answer is its own: nothing is cached.
type torchConnChecker struct {
	ctx context.Context
	log *zap.Logger
	ask func(ctx context.Context, round string, conns []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error)

	mu     sync.Mutex
	queues map[torchConnFrom][]*torchConnCheck // waiting for their node's next question; a goroutine asks while one is here
}

// torchConnFrom is whom a question goes to: a node of a round, by address.
type torchConnFrom struct {
	round string
	node  netip.Addr
}

// torchConnCheck is one connection waiting for its verdict.
type torchConnCheck struct {
	conn *musterv1.TorchConn
	done chan error // one verdict: nil when allowed
}

func newTorchConnChecker(ctx context.Context, log *zap.Logger, ask func(context.Context, string, []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error)) *torchConnChecker {
	if ctx == nil {
		ctx = context.Background()
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &torchConnChecker{ctx: ctx, log: log, ask: ask, queues: map[torchConnFrom][]*torchConnCheck{}}
}

// check says why the connection client -> server of round may not use the
// store, if it may not, once the client's node has answered.
func (c *torchConnChecker) check(ctx context.Context, round string, client, server netip.AddrPort) error {
	q := &torchConnCheck{conn: &musterv1.TorchConn{Client: client.String(), Server: server.String()}, done: make(chan error, 1)}
	from := torchConnFrom{round: round, node: client.Addr()}
	c.mu.Lock()
	queue, running := c.queues[from]
	c.queues[from] = append(queue, q)
	c.mu.Unlock()
	if !running {
		go c.run(from)
	}
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run asks about the connections waiting from one node, a batch at a
// time, until none waits. The queues are bounded by the store's connection
// limit (a connection waiting to be admitted holds a place), and their
// number by the job's nodes (only their addresses are asked about).
func (c *torchConnChecker) run(from torchConnFrom) {
	for {
		c.mu.Lock()
		queue := c.queues[from]
		if len(queue) == 0 {
			delete(c.queues, from)
			c.mu.Unlock()
			return
		}
		batch := queue[:min(len(queue), storewire.MaxTorchConns)]
		c.queues[from] = queue[len(batch):]
		c.mu.Unlock()
		c.askBatch(from, batch)
	}
}

// askBatch asks about batch and hands each connection its verdict.
func (c *torchConnChecker) askBatch(from torchConnFrom, batch []*torchConnCheck) {
	conns := make([]*musterv1.TorchConn, len(batch))
	for i, q := range batch {
		conns[i] = q.conn
	}
	ctx, cancel := context.WithTimeout(c.ctx, torchCheckWait)
	defer cancel()
	asked := time.Now()
	verdicts, err := c.askRetrying(ctx, from.round, conns)
	if err == nil && len(verdicts) != len(conns) {
		err = fmt.Errorf("the store gave %d verdicts for %d connections", len(verdicts), len(conns))
	}
	c.log.Debug("asked who made TCPStore connections", zap.String("round", from.round), zap.Stringer("from", from.node),
		zap.Int("conns", len(conns)), zap.Duration("took", time.Since(asked)), zap.Error(err))
	for i, q := range batch {
		switch {
		case err != nil:
			q.done <- fmt.Errorf("from another node, whose agent could not be asked who made it: %w", err)
		case verdicts[i].GetAllowed():
			q.done <- nil
		default:
			q.done <- errors.New(verdicts[i].GetReason())
		}
	}
}

// askRetrying asks until the store answers, while its answer is that it
// cannot now: this agent is registering again, or the node has too many
// questions waiting.
func (c *torchConnChecker) askRetrying(ctx context.Context, round string, conns []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error) {
	delay := 50 * time.Millisecond
	for {
		verdicts, err := c.ask(ctx, round, conns)
		switch status.Code(err) {
		case codes.Unavailable, codes.ResourceExhausted:
		default:
			return verdicts, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// askTorchConns asks the store about connections to job's TCPStore.
func (a *Agent) askTorchConns(job string) func(context.Context, string, []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error) {
	return func(ctx context.Context, round string, conns []*musterv1.TorchConn) ([]*musterv1.TorchConnVerdict, error) {
		resp, err := a.client.CheckTorchConns(ctx, &musterv1.CheckTorchConnsRequest{Session: a.sessionID(), JobId: job, RoundId: round, Conns: conns})
		return resp.GetVerdicts(), err
	}
}

// answerTorchConns answers the store's question about connections to a
// job's TCPStore from this node: whose sockets made them.
func (a *Agent) answerTorchConns(q *musterv1.CheckTorchConns) {
	began := time.Now()
	a.mu.Lock()
	r := a.jobs[q.GetJobId()]
	a.mu.Unlock()
	var verdicts []*musterv1.TorchConnVerdict
	if r == nil {
		verdicts = refuseTorchConns(len(q.GetConns()), fmt.Sprintf("job %s runs no worker on node %s", q.GetJobId(), a.cfg.Name))
	} else if d, err := security.OpenSockDiag(); err != nil {
		verdicts = refuseTorchConns(len(q.GetConns()), err.Error())
	} else {
		verdicts = judgeTorchConns(q.GetConns(), jobUID(r.asg), d.Owner)
		d.Close()
	}
	judged := time.Since(began)
	ctx, cancel := context.WithTimeout(a.ctx, torchAnswerTimeout)
	defer cancel()
	_, err := a.client.TorchConnsChecked(ctx, &musterv1.TorchConnsCheckedRequest{Session: a.sessionID(), RequestId: q.GetRequestId(), Verdicts: verdicts})
	a.log.Debug("said who made TCPStore connections", zap.String("job", q.GetJobId()), zap.Int("conns", len(verdicts)),
		zap.Duration("judged-in", judged), zap.Duration("took", time.Since(began)), zap.Error(err))
	if err != nil {
		a.log.Info("could not tell the store who made connections to a TCPStore", zap.String("job", q.GetJobId()), zap.Error(err))
	}
}

func refuseTorchConns(n int, why string) []*musterv1.TorchConnVerdict {
	verdicts := make([]*musterv1.TorchConnVerdict, n)
	for i := range verdicts {
		verdicts[i] = &musterv1.TorchConnVerdict{Reason: clipReason(why)}
	}
	return verdicts
}

// judgeTorchConns says, for each of conns, whether a process of uid made
// it on this node: owner finds the uid of the socket whose own address and
// peer are given.
func judgeTorchConns(conns []*musterv1.TorchConn, uid uint32, owner func(local, remote netip.AddrPort) (uint32, bool, error)) []*musterv1.TorchConnVerdict {
	verdicts := make([]*musterv1.TorchConnVerdict, len(conns))
	for i, c := range conns {
		v := &musterv1.TorchConnVerdict{}
		verdicts[i] = v
		client, server, err := security.ParseTCPEnds(c.GetClient(), c.GetServer())
		if err != nil {
			v.Reason = clipReason(err.Error())
			continue
		}
		got, found, err := owner(client, server)
		switch {
		case err != nil:
			v.Reason = clipReason(err.Error())
		case !found:
			v.Reason = "no socket of this node made it"
		case got != uid:
			v.Reason = fmt.Sprintf("a process of uid %d, not of the job's user (uid %d)", got, uid)
		default:
			v.Allowed = true
		}
	}
	return verdicts
}

// clipReason keeps a reason within what the store takes, and UTF-8.
func clipReason(s string) string {
	if len(s) > storewire.MaxTorchConnReason {
		s = s[:storewire.MaxTorchConnReason]
	}
	return strings.ToValidUTF8(s, "")
}
