package storeserver

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
	"github.com/musterhq/muster/storewire"
)

// PyTorch's clients carry no credential, so the agent that serves a job's
// TCPStore admits a connection from another of the job's nodes only once
// that node's agent, which sees the socket that made it, says a process of
// the job's user owns it. Agents serve no port: the store relays the
// question over the node's Watch stream and the answer back, as it relays
// kept output (logs.go).

// Bounds on relaying those questions.
const (
	// torchAnswerWait is how long a node has to answer; a connection it
	// has not answered for is refused.
	torchAnswerWait = 5 * time.Second
	// maxTorchChecksPerNode bounds the questions waiting for one node's
	// answer: each is a command on its stream, which must never fill
	// (maxPending). The agents that ask batch their connections, one
	// question per job's store at a time.
	maxTorchChecksPerNode = 64
)

// torchChecks are the CheckTorchConns calls waiting for nodes' answers.
type torchChecks struct {
	mu      sync.Mutex
	m       map[string]*torchCheck // by request
	perNode map[string]int
}

// torchCheck is one node's part of a CheckTorchConns call.
type torchCheck struct {
	node    string
	n       int // connections asked about
	answers chan<- torchAnswer
}

type torchAnswer struct {
	node     string
	verdicts []*musterv1.TorchConnVerdict
}

// open registers a question to each of nodes, all or none: none when one
// of them has too many waiting already.
func (tc *torchChecks) open(nodes map[string][]int, answers chan<- torchAnswer) (map[string]string, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.m == nil {
		tc.m, tc.perNode = map[string]*torchCheck{}, map[string]int{}
	}
	for name := range nodes {
		if tc.perNode[name] >= maxTorchChecksPerNode {
			return nil, status.Errorf(codes.ResourceExhausted, "node %s has %d questions about TCPStore connections waiting", name, maxTorchChecksPerNode)
		}
	}
	ids := make(map[string]string, len(nodes))
	for name, conns := range nodes {
		id := newRequestID()
		tc.m[id] = &torchCheck{node: name, n: len(conns), answers: answers}
		tc.perNode[name]++
		ids[name] = id
	}
	return ids, nil
}

// close forgets the questions of ids, answered or not.
func (tc *torchChecks) close(ids map[string]string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, id := range ids {
		if c := tc.m[id]; c != nil {
			delete(tc.m, id)
			if tc.perNode[c.node]--; tc.perNode[c.node] <= 0 {
				delete(tc.perNode, c.node)
			}
		}
	}
}

// answer hands node's verdicts to the call that asked it, once.
func (tc *torchChecks) answer(id, node string, verdicts []*musterv1.TorchConnVerdict) error {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	c := tc.m[id]
	switch {
	case c == nil:
		return status.Error(codes.NotFound, "no such question: it was answered, or the agent that asked is gone")
	case c.node != node:
		return status.Errorf(codes.PermissionDenied, "node %s was not asked this question", node)
	case len(verdicts) != c.n:
		return status.Errorf(codes.InvalidArgument, "%d verdicts for %d connections", len(verdicts), c.n)
	}
	delete(tc.m, id)
	if tc.perNode[node]--; tc.perNode[node] <= 0 {
		delete(tc.perNode, node)
	}
	// The channel holds an answer from every node asked: this never blocks.
	c.answers <- torchAnswer{node: node, verdicts: verdicts}
	return nil
}

// CheckTorchConns asks the nodes that connections to a job's TCPStore came
// from who made them, for the agent that serves the store in the round.
func (s *Server) CheckTorchConns(ctx context.Context, req *musterv1.CheckTorchConnsRequest) (*musterv1.CheckTorchConnsResponse, error) {
	conns := req.GetConns()
	if len(conns) == 0 || len(conns) > storewire.MaxTorchConns {
		return nil, status.Errorf(codes.InvalidArgument, "%d connections in one question, not 1 to %d", len(conns), storewire.MaxTorchConns)
	}
	ips := make([]netip.Addr, len(conns))
	for i, c := range conns {
		client, _, err := security.ParseTCPEnds(c.GetClient(), c.GetServer())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		ips[i] = client.Addr()
	}
	names, err := s.store.TorchConnNodes(req.GetSession(), req.GetJobId(), req.GetRoundId(), ips)
	if err != nil {
		return nil, rpcError(err)
	}
	verdicts := make([]*musterv1.TorchConnVerdict, len(conns))
	byNode := map[string][]int{}
	for i, ip := range ips {
		for _, name := range names[ip] {
			byNode[name] = append(byNode[name], i)
		}
		if len(names[ip]) == 0 {
			verdicts[i] = &musterv1.TorchConnVerdict{Reason: fmt.Sprintf("%s is no other node's address in round %s", ip, req.GetRoundId())}
		}
	}
	if len(byNode) > 0 {
		if err := s.askTorchConns(ctx, req, byNode, verdicts); err != nil {
			return nil, err
		}
	}
	return &musterv1.CheckTorchConnsResponse{Verdicts: verdicts}, nil
}

// askTorchConns asks each node of byNode about its connections and sets
// their verdicts: a connection is allowed when a node at its address says
// so (nodes that share an address are all asked), refused otherwise. When
// no node at a connection's address is connected to hear the question
// (its agent is registering again), the call fails Unavailable, for the
// asker to ask again: a rank must not be turned away for that.
func (s *Server) askTorchConns(ctx context.Context, req *musterv1.CheckTorchConnsRequest, byNode map[string][]int, verdicts []*musterv1.TorchConnVerdict) error {
	answers := make(chan torchAnswer, len(byNode))
	ids, err := s.torch.open(byNode, answers)
	if err != nil {
		return err
	}
	defer s.torch.close(ids)
	reasons := make([][]string, len(verdicts))
	refuse := func(idx []int, why string) {
		for _, i := range idx {
			reasons[i] = append(reasons[i], why)
		}
	}
	waiting := map[string]bool{}
	asked := make([]bool, len(verdicts))
	var away []string
	for name, idx := range byNode {
		cmd := &musterv1.CheckTorchConns{RequestId: ids[name], JobId: req.GetJobId(), Conns: make([]*musterv1.TorchConn, len(idx))}
		for j, i := range idx {
			cmd.Conns[j] = req.GetConns()[i]
		}
		if !s.store.AskTorchConns(name, cmd) {
			away = append(away, name)
			continue
		}
		for _, i := range idx {
			asked[i] = true
		}
		waiting[name] = true
	}
	for _, name := range away {
		for _, i := range byNode[name] {
			if !asked[i] {
				return status.Errorf(codes.Unavailable, "node %s is not connected to the store now", name)
			}
		}
	}
	timer := time.NewTimer(torchAnswerWait)
	defer timer.Stop()
	for len(waiting) > 0 {
		select {
		case a := <-answers:
			delete(waiting, a.node)
			for j, i := range byNode[a.node] {
				v := a.verdicts[j]
				if v.GetAllowed() {
					verdicts[i] = &musterv1.TorchConnVerdict{Allowed: true}
				} else {
					refuse([]int{i}, fmt.Sprintf("node %s: %s", a.node, v.GetReason()))
				}
			}
		case <-timer.C:
			for name := range waiting {
				refuse(byNode[name], fmt.Sprintf("node %s did not answer within %v", name, torchAnswerWait))
			}
			waiting = nil
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	for i, r := range reasons {
		if verdicts[i] == nil {
			verdicts[i] = &musterv1.TorchConnVerdict{Reason: strings.Join(r, "; ")}
		}
	}
	return nil
}

// TorchConnsChecked hands a node's answer to the CheckTorchConns call that
// asked it.
func (s *Server) TorchConnsChecked(_ context.Context, req *musterv1.TorchConnsCheckedRequest) (*musterv1.TorchConnsCheckedResponse, error) {
	node, err := s.store.SessionNode(req.GetSession())
	if err != nil {
		return nil, rpcError(err)
	}
	for _, v := range req.GetVerdicts() {
		if r := v.GetReason(); len(r) > storewire.MaxTorchConnReason || !utf8.ValidString(r) {
			return nil, status.Errorf(codes.InvalidArgument, "a reason of %d bytes, or not UTF-8", len(r))
		}
	}
	return &musterv1.TorchConnsCheckedResponse{}, s.torch.answer(req.GetRequestId(), node, req.GetVerdicts())
}
