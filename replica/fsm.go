package replica

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"

	"github.com/musterhq/muster/rendezvous"
)

// maxSnapshotBytes bounds a snapshot read back.
const maxSnapshotBytes = 1 << 30

// applied is what applying a command gave, for the replica that proposed it.
type applied struct {
	res rendezvous.Result
	err error
}

// fsm is the store as raft's state machine.
type fsm struct {
	store *rendezvous.Store
	log   *zap.Logger
}

func (f *fsm) Apply(l *raft.Log) any {
	c, err := rendezvous.UnmarshalCommand(l.Data)
	if err != nil {
		f.log.Error("replicated command not understood; skipped", zap.Uint64("index", l.Index), zap.Error(err))
		return applied{err: err}
	}
	res, err := f.store.ApplyCommitted(c)
	return applied{res: res, err: err}
}

// snapshotter is a store that can write its table down and read it back.
type snapshotter interface {
	Snapshot() ([]byte, error)
	Restore([]byte) error
}

func canSnapshot(s *rendezvous.Store) bool {
	_, ok := any(s).(snapshotter)
	return ok
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	s, ok := any(f.store).(snapshotter)
	if !ok {
		return nil, fmt.Errorf("the store keeps no snapshots")
	}
	b, err := s.Snapshot()
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, ok := any(f.store).(snapshotter)
	if !ok {
		return fmt.Errorf("the store keeps no snapshots")
	}
	b, err := io.ReadAll(io.LimitReader(rc, maxSnapshotBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxSnapshotBytes {
		return fmt.Errorf("snapshot larger than %d bytes", maxSnapshotBytes)
	}
	return s.Restore(b)
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}
