package storeserver

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/kv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// The KV service: workers' keys and barriers, in their own job's space of
// the store's kv.Store. The scope comes from the caller's job credential.

func (s *Server) KVSet(ctx context.Context, req *musterv1.KVSetRequest) (*musterv1.KVSetResponse, error) {
	scope, err := jobScope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	v, err := s.store.KV().Space(scope).Set(req.GetKey(), req.GetValue())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &musterv1.KVSetResponse{Version: v}, nil
}

func waitContext(ctx context.Context, ms int64) (context.Context, context.CancelFunc) {
	d := time.Duration(ms) * time.Millisecond
	if d <= 0 || d > maxWaitTimeout {
		d = maxWaitTimeout
	}
	return context.WithTimeout(ctx, d)
}

func (s *Server) KVGet(ctx context.Context, req *musterv1.KVGetRequest) (*musterv1.KVGetResponse, error) {
	scope, err := jobScope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	ctx, cancel := waitContext(ctx, req.GetTimeoutMs())
	defer cancel()
	v, ver, err := s.store.KV().Space(scope).Get(ctx, req.GetKey(), req.GetWait())
	if err != nil {
		return nil, kvError(err)
	}
	return &musterv1.KVGetResponse{Value: v, Version: ver}, nil
}

func (s *Server) Barrier(ctx context.Context, req *musterv1.BarrierRequest) (*musterv1.BarrierResponse, error) {
	scope, err := jobScope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	ctx, cancel := waitContext(ctx, req.GetTimeoutMs())
	defer cancel()
	err = s.store.KV().Space(scope).Barrier(ctx, req.GetName(), req.GetParticipant(), int(req.GetCount()))
	return &musterv1.BarrierResponse{}, kvError(err)
}

func kvError(err error) error {
	if errors.Is(err, kv.ErrNotFound) {
		return status.Error(codes.NotFound, err.Error())
	}
	return rpcError(err)
}
