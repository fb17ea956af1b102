package pmi

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/musterhq/muster/kv"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// SpaceBackend is a Backend on a job's kv.Space: the PMI keys live under
// "pmi/" beside the job's other keys, and barrier seq is the kv barrier
// "pmi/barrier/<seq>" that Nodes participants named by Node complete.
type SpaceBackend struct {
	Space kv.Space
	Node  string // this node, unique in the job
	Nodes int    // nodes in the job
}

func (b SpaceBackend) Put(_ context.Context, key string, value []byte) error {
	_, err := b.Space.Set("pmi/"+key, value)
	return err
}

func (b SpaceBackend) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, _, err := b.Space.Get(ctx, "pmi/"+key, false)
	if errors.Is(err, kv.ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

func (b SpaceBackend) Barrier(ctx context.Context, seq int) error {
	return b.Space.Barrier(ctx, "pmi/barrier/"+strconv.Itoa(seq), b.Node, b.Nodes)
}

// StoreBackend is a Backend on the store's KV service, called with the
// job's credential so that it reaches that job's keys only: keys are
// Prefix+key, and barrier seq is the store barrier Prefix+"barrier/<seq>"
// that Nodes participants named by Node complete.
type StoreBackend struct {
	KV musterv1.KVClient
	// Prefix starts with "pmi/" and names the round ("pmi/<round>/"): a job
	// started again begins its keys and barrier numbers afresh.
	Prefix string
	Node   string // this node, unique in the job
	Nodes  int    // nodes in the job
}

func (b StoreBackend) Put(ctx context.Context, key string, value []byte) error {
	_, err := b.KV.KVSet(ctx, &musterv1.KVSetRequest{Key: b.Prefix + key, Value: value})
	return storeError(err)
}

func (b StoreBackend) Get(ctx context.Context, key string) ([]byte, bool, error) {
	resp, err := b.KV.KVGet(ctx, &musterv1.KVGetRequest{Key: b.Prefix + key})
	if status.Code(err) == codes.NotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, storeError(err)
	}
	return resp.GetValue(), true, nil
}

// Barrier waits as long as ctx allows: the store bounds each wait (an
// hour), and MPI_Finalize's barrier may wait on ranks that compute longer,
// so a wait the store ended is made again (arriving twice counts once).
func (b StoreBackend) Barrier(ctx context.Context, seq int) error {
	name := b.Prefix + "barrier/" + strconv.Itoa(seq)
	for {
		_, err := b.KV.Barrier(ctx, &musterv1.BarrierRequest{Name: name, Participant: b.Node, Count: int32(b.Nodes)})
		if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
			continue
		}
		return storeError(err)
	}
}

// storeError is a store call's error without gRPC's framing.
func storeError(err error) error {
	if s, ok := status.FromError(err); ok && err != nil {
		return errors.New(s.Message())
	}
	return err
}
