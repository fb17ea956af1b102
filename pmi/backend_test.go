package pmi

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/kv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// kvService answers KV calls from a kv.Space as the store's KV service does,
// and ends the first barrier wait as the store's own wait bound would.
type kvService struct {
	space     kv.Space
	mu        sync.Mutex
	cutWaited bool
	cut       chan struct{} // closed once the first wait was ended
}

func (f *kvService) KVSet(_ context.Context, req *musterv1.KVSetRequest, _ ...grpc.CallOption) (*musterv1.KVSetResponse, error) {
	v, err := f.space.Set(req.GetKey(), req.GetValue())
	return &musterv1.KVSetResponse{Version: v}, err
}

func (f *kvService) KVGet(ctx context.Context, req *musterv1.KVGetRequest, _ ...grpc.CallOption) (*musterv1.KVGetResponse, error) {
	v, _, err := f.space.Get(ctx, req.GetKey(), req.GetWait())
	if errors.Is(err, kv.ErrNotFound) {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	return &musterv1.KVGetResponse{Value: v}, err
}

func (f *kvService) Barrier(ctx context.Context, req *musterv1.BarrierRequest, _ ...grpc.CallOption) (*musterv1.BarrierResponse, error) {
	f.mu.Lock()
	cut := !f.cutWaited
	f.cutWaited = true
	f.mu.Unlock()
	if cut {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		ctx = wctx
	}
	err := f.space.Barrier(ctx, req.GetName(), req.GetParticipant(), int(req.GetCount()))
	if cut {
		close(f.cut)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, status.Error(codes.DeadlineExceeded, err.Error())
	}
	return &musterv1.BarrierResponse{}, err
}

func TestStoreBackend(t *testing.T) {
	space := kv.NewMemory().Space("job")
	svc := &kvService{space: space, cut: make(chan struct{})}
	a := StoreBackend{KV: svc, Prefix: "pmi/r-1/", Node: "a", Nodes: 2}
	b := StoreBackend{KV: svc, Prefix: "pmi/r-1/", Node: "b", Nodes: 2}
	ctx := t.Context()
	if _, ok, err := a.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("missing key: ok %v, err %v", ok, err)
	}
	if err := a.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := b.Get(ctx, "k"); string(v) != "v" || !ok || err != nil {
		t.Fatalf("get = %q %v %v", v, ok, err)
	}
	if _, _, err := space.Get(ctx, "pmi/r-1/k", false); err != nil {
		t.Errorf("key not under the prefix: %v", err)
	}
	// Node a's first wait is cut short by the "store"; it waits again and
	// still meets node b.
	errs := make(chan error, 2)
	go func() { errs <- a.Barrier(ctx, 0) }()
	<-svc.cut
	go func() { errs <- b.Barrier(ctx, 0) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := space.Barrier(ctx, "pmi/r-1/barrier/0", "a", 2); err != nil {
		t.Errorf("barrier not named pmi/r-1/barrier/0: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Barrier(cancelled, 1); err == nil {
		t.Error("barrier with an ended context returned nil")
	}
}
