package storeserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/musterhq/muster/rendezvous"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/ranklog"
)

// Bounds on relaying a job's kept output.
const (
	// MaxLogRecords is the most records one PushLogs message may carry.
	MaxLogRecords = 1024
	// logAnswerWait is how long a node has to start answering a SendLogs.
	logAnswerWait = 10 * time.Second
)

// The launcher asks the store, not the agents: agents serve no port, and
// the store already authenticates launchers and knows who owns a job and
// which nodes ran it. Each node asked answers on a PushLogs stream of its
// own; the store relays what comes, one message at a time, so a launcher
// that reads slowly slows the agents' reading of their files.

// logRelays are the Logs calls waiting for nodes' answers, by request.
type logRelays struct {
	mu sync.Mutex
	m  map[string]*logRelay
}

// logRelay carries one Logs call's answers from the nodes it asked.
type logRelay struct {
	asked    map[string]bool // node names asked; true once answering
	out      chan *musterv1.LogsResponse
	finished chan string   // a node's answer ended
	gone     chan struct{} // the Logs call returned
}

func (l *logRelays) open(id string, nodes []string) *logRelay {
	r := &logRelay{asked: map[string]bool{}, out: make(chan *musterv1.LogsResponse),
		finished: make(chan string, len(nodes)), gone: make(chan struct{})}
	for _, n := range nodes {
		r.asked[n] = false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*logRelay{}
	}
	l.m[id] = r
	return r
}

func (l *logRelays) close(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.m[id]; r != nil {
		close(r.gone)
		delete(l.m, id)
	}
}

// attach lets node answer request id, once.
func (l *logRelays) attach(id, node string) (*logRelay, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.m[id]
	if r == nil {
		return nil, status.Error(codes.NotFound, "no such logs request: the launcher that asked is gone")
	}
	answering, asked := r.asked[node]
	switch {
	case !asked:
		return nil, status.Errorf(codes.PermissionDenied, "node %s was not asked for these logs", node)
	case answering:
		return nil, status.Errorf(codes.AlreadyExists, "node %s already answers these logs", node)
	}
	r.asked[node] = true
	return r, nil
}

func newRequestID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Logs streams a job's kept output to its owner or the operator: from each
// node that ran it in turn, or with follow from all at once until the job
// ends on each.
func (s *Server) Logs(req *musterv1.LogsRequest, stream musterv1.Jobs_LogsServer) error {
	ctx := stream.Context()
	if req.Rank != nil && req.GetRank() < 0 {
		return status.Errorf(codes.InvalidArgument, "--rank %d is not a rank", req.GetRank())
	}
	if req.Tail != nil && req.GetTail() < 0 {
		return status.Errorf(codes.InvalidArgument, "--tail %d is negative", req.GetTail())
	}
	nodes, err := s.logNodes(callerFrom(ctx), req.GetJobId())
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return status.Errorf(codes.FailedPrecondition, "job %s has not started on any node", req.GetJobId())
	}
	if req.GetFollow() {
		return s.followLogs(ctx, req, nodes, stream)
	}
	// One node after another: each rank's output comes whole, in rank order.
	for _, n := range nodes {
		if err := s.relayLogs(ctx, req, []string{n}, stream.Send); err != nil {
			return err
		}
	}
	return nil
}

// followLogs relays a running job's output as it comes, round after round,
// until the job ends: when its nodes have ended a round and the job goes
// on, the nodes of every round are asked again, and what a node sent
// before is not sent twice.
func (s *Server) followLogs(ctx context.Context, req *musterv1.LogsRequest, nodes []string, stream musterv1.Jobs_LogsServer) error {
	type key struct {
		node         string
		rank, stream int32
	}
	last := map[key]uint64{}
	send := func(resp *musterv1.LogsResponse) error {
		fresh := resp.Records[:0]
		for _, r := range resp.GetRecords() {
			k := key{resp.GetNode(), r.GetRank(), int32(r.GetStream())}
			if r.GetSeq() > last[k] {
				last[k] = r.GetSeq()
				fresh = append(fresh, r)
			}
		}
		if resp.Records = fresh; len(fresh) == 0 && resp.GetNote() == "" {
			return nil
		}
		return stream.Send(resp)
	}
	for {
		started := lastStartedRound(s.store.Job(req.GetJobId()))
		if err := s.relayLogs(ctx, req, nodes, send); err != nil {
			return err
		}
		// The nodes have said all of this round: wait for the job's next
		// round to start its workers, or for its end.
		for {
			changed := s.store.JobsChanged()
			j := s.store.Job(req.GetJobId())
			if j == nil || j.GetState().Ended() {
				return nil
			}
			if lastStartedRound(j) > started {
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var err error
		if nodes, err = s.store.LogNodes(req.GetJobId()); err != nil {
			return nil // the job is gone: it ended
		}
	}
}

// lastStartedRound is the number of j's last round that started its
// workers; -1 before the first, or for no job.
func lastStartedRound(j *musterv1.JobStatus) int32 {
	if r := j.GetRoundNodes(); len(r) > 0 {
		return r[len(r)-1].GetNumber()
	}
	return -1
}

// logNodes names the nodes that ran the job's rounds, for c to read their
// output: from the store, or from its history for a job it no longer holds
// (it ended before the store restarted).
func (s *Server) logNodes(c caller, jobID string) ([]string, error) {
	nodes, err := s.store.LogNodes(jobID)
	switch {
	case err == nil:
		if err := s.mayUseJob(c, jobID); err != nil {
			return nil, err
		}
		return nodes, nil
	case !errors.Is(err, rendezvous.ErrNotFound):
		return nil, rpcError(err)
	}
	j := s.history.Get(jobID)
	if j == nil {
		return nil, status.Errorf(codes.NotFound, "job %q: not found (neither running nor in the store's history)", jobID)
	}
	if !mayRead(c, j) {
		return nil, status.Errorf(codes.PermissionDenied, "job %s belongs to another user", jobID)
	}
	for _, r := range j.GetRoundNodes() {
		for _, n := range r.GetNodes() {
			if !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
	}
	return nodes, nil
}

// relayLogs asks nodes for the job's output and relays their answers until
// each has ended.
func (s *Server) relayLogs(ctx context.Context, req *musterv1.LogsRequest, nodes []string, send func(*musterv1.LogsResponse) error) error {
	id := newRequestID()
	relay := s.logs.open(id, nodes)
	defer s.logs.close(id)
	cmd := &musterv1.SendLogs{RequestId: id, JobId: req.GetJobId(), Rank: req.Rank, Follow: req.GetFollow(), Tail: req.Tail}
	waiting := map[string]bool{}
	for _, n := range nodes {
		if !s.store.AskLogs(n, cmd) {
			if err := send(&musterv1.LogsResponse{Node: n, Note: "not connected to the store: its ranks' output cannot be read now"}); err != nil {
				return err
			}
			continue
		}
		waiting[n] = true
	}
	// A node that never answers (an agent of a version without kept
	// output, or one that went away) is named once the wait is over.
	answerBy := time.NewTimer(logAnswerWait)
	defer answerBy.Stop()
	for len(waiting) > 0 {
		select {
		case resp := <-relay.out:
			if err := send(resp); err != nil {
				return err
			}
		case n := <-relay.finished:
			delete(waiting, n)
		case <-answerBy.C:
			s.logs.mu.Lock()
			var silent []string
			for n := range waiting {
				if !relay.asked[n] {
					silent = append(silent, n)
				}
			}
			s.logs.mu.Unlock()
			for _, n := range silent {
				delete(waiting, n)
				if err := send(&musterv1.LogsResponse{Node: n, Note: fmt.Sprintf("did not answer within %v", logAnswerWait)}); err != nil {
					return err
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// PushLogs relays a node's answer to a SendLogs command.
func (s *Server) PushLogs(stream musterv1.Agents_PushLogsServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	node, err := s.store.SessionNode(first.GetSession())
	if err != nil {
		return rpcError(err)
	}
	relay, err := s.logs.attach(first.GetRequestId(), node)
	if err != nil {
		return err
	}
	defer func() {
		select {
		case relay.finished <- node:
		case <-relay.gone:
		}
	}()
	for msg := first; ; {
		if err := checkPushLogs(msg); err != nil {
			return err
		}
		resp := &musterv1.LogsResponse{Records: msg.GetRecords(), Node: node, Note: msg.GetError()}
		if len(resp.Records) > 0 || resp.Note != "" {
			select {
			case relay.out <- resp:
			case <-relay.gone:
				return stream.SendAndClose(&musterv1.PushLogsResponse{})
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if msg, err = stream.Recv(); err == io.EOF {
			return stream.SendAndClose(&musterv1.PushLogsResponse{})
		} else if err != nil {
			return err
		}
	}
}

// checkPushLogs bounds what one message from an agent may carry.
func checkPushLogs(m *musterv1.PushLogsRequest) error {
	if n := len(m.GetRecords()); n > MaxLogRecords {
		return status.Errorf(codes.InvalidArgument, "%d log records in one message, more than %d", n, MaxLogRecords)
	}
	if n := len(m.GetError()); n > 4096 {
		return status.Errorf(codes.InvalidArgument, "a log error of %d bytes", n)
	}
	for _, r := range m.GetRecords() {
		switch {
		case len(r.GetData()) > ranklog.MaxData:
			return status.Errorf(codes.InvalidArgument, "a log record of %d bytes, more than %d", len(r.GetData()), ranklog.MaxData)
		case r.GetStream() != musterv1.Stream_STREAM_STDOUT && r.GetStream() != musterv1.Stream_STREAM_STDERR:
			return status.Errorf(codes.InvalidArgument, "a log record of stream %v", r.GetStream())
		case r.GetRank() < 0:
			return status.Errorf(codes.InvalidArgument, "a log record of rank %d", r.GetRank())
		}
	}
	return nil
}
