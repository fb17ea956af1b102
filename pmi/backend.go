package pmi

import (
	"context"
	"errors"
	"strconv"

	"github.com/musterhq/muster/kv"
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
