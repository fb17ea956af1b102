package storeserver

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
	"github.com/musterhq/muster/storewire"
)

// A replicated store serves its leader's calls on the leader alone. A
// follower answers what its copy of the table answers as well (the jobs,
// the nodes, its own status) and refuses the rest with the leader's
// address as a field (storeclient.LeaderOf), which clients follow.

// followerMethods are the calls a follower answers from its own table.
var followerMethods = map[string]bool{
	musterv1.Jobs_ListJobs_FullMethodName:          true,
	musterv1.Jobs_GetJob_FullMethodName:            true,
	musterv1.Jobs_ListNodes_FullMethodName:         true,
	musterv1.Replicas_ReplicaStatus_FullMethodName: true,
}

// mayServe refuses, on a replica that does not lead, a call only the
// leader takes.
func (s *Server) mayServe(method string) error {
	if s.replica == nil || followerMethods[method] || s.store.Leading() {
		return nil
	}
	return s.notLeader()
}

// notLeader is a follower's refusal, naming the leader.
func (s *Server) notLeader() error {
	return notLeaderStatus(s.replica.LeaderAddr())
}

func notLeaderStatus(leader string) error {
	st := status.New(codes.Unavailable, (&rendezvous.NotLeaderError{Leader: leader}).Error())
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: storewire.NotLeaderReason, Domain: "muster",
		Metadata: map[string]string{"leader": leader}}); err == nil {
		st = d
	}
	return st.Err()
}

// whileLeading is ctx, ended too when a replicated store stops leading:
// its streams then end, and their clients find the new leader.
func (s *Server) whileLeading(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if s.replica == nil {
		return ctx, cancel
	}
	deposed := s.store.Deposed()
	go func() {
		select {
		case <-deposed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (s *Server) ReplicaStatus(context.Context, *musterv1.ReplicaStatusRequest) (*musterv1.ReplicaStatusResponse, error) {
	if s.replica == nil {
		return &musterv1.ReplicaStatusResponse{Addr: s.store.Addr(), Node: s.cfg.OwnNode, Role: musterv1.ReplicaRole_REPLICA_ROLE_SINGLE,
			LeaderAddr: s.store.Addr(), Replicas: []string{s.store.Addr()}}, nil
	}
	return s.replica.Status(s.cfg.OwnNode), nil
}

func (s *Server) ChangeReplicas(_ context.Context, req *musterv1.ChangeReplicasRequest) (*musterv1.ChangeReplicasResponse, error) {
	if s.replica == nil {
		return nil, status.Error(codes.FailedPrecondition, "this store is not replicated: start its agents with --store-peers to add replicas")
	}
	replicas, err := s.replica.Change(req.GetAddr(), req.GetRemove())
	if errors.Is(err, rendezvous.ErrNotLeader) {
		return nil, s.notLeader()
	}
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &musterv1.ChangeReplicasResponse{Replicas: replicas}, nil
}

// storeReplicas are the store addresses clients may reach it at.
func (s *Server) storeReplicas() []string {
	if s.replica == nil {
		return nil
	}
	return s.replica.Replicas()
}
