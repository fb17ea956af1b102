package agent

import (
	"context"
	"io"
	"os"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// stdinFeed gives the job's stdin ranks on this node the launcher's stdin:
// each such worker's stdin is a pipe that the feed fills from the store's
// ReadStdin stream, closing it at the stdin's end. A worker that does not
// read fills its pipe and then holds up only the stdin (the store holds a
// few chunks, the launcher waits): its output and its exit go their own way.
type stdinFeed struct {
	log     *zap.Logger
	readers map[int]*os.File // the workers' ends, by local rank
	writers []*os.File       // the feed's ends
	cancel  context.CancelFunc
	done    chan struct{}
}

// readsStdin says whether global rank reads the launcher's stdin.
func readsStdin(spec *musterv1.JobSpec, rank int) bool {
	return spec.GetStdinAll() || spec.StdinRank != nil && int(spec.GetStdinRank()) == rank
}

// newStdinFeed makes a pipe for each of ranks (local rank -> global rank)
// that reads stdin; with none, it returns nil.
func newStdinFeed(log *zap.Logger, spec *musterv1.JobSpec, ranks map[int]int) (*stdinFeed, error) {
	f := &stdinFeed{log: log, readers: map[int]*os.File{}, done: make(chan struct{})}
	for local, rank := range ranks {
		if !readsStdin(spec, rank) {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			f.close()
			return nil, err
		}
		f.readers[local] = r
		f.writers = append(f.writers, w)
	}
	if len(f.readers) == 0 {
		return nil, nil
	}
	return f, nil
}

// reader is local rank's stdin, or nil for /dev/null. The worker's start
// closes it in the agent once the worker holds its own copy.
func (f *stdinFeed) reader(local int) *os.File {
	if f == nil {
		return nil
	}
	return f.readers[local]
}

// start feeds the pipes from the store's stream, which read opens, until
// the stdin ends, every worker stopped reading, or close is called.
func (f *stdinFeed) start(read func(ctx context.Context) (musterv1.Agents_ReadStdinClient, error)) {
	if f == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.done)
		defer f.closeWriters()
		stream, err := read(ctx)
		if err != nil {
			f.log.Warn("cannot read the job's stdin from the store", zap.Error(err))
			return
		}
		live := append([]*os.File(nil), f.writers...)
		for len(live) > 0 {
			chunk, err := stream.Recv()
			if err != nil {
				if err != io.EOF && ctx.Err() == nil {
					f.log.Info("stdin stream ended", zap.Error(err))
				}
				return
			}
			kept := live[:0]
			for _, w := range live {
				// An error is a worker that exited or closed its stdin
				// (EPIPE), or a job that ended (closed): it reads no more.
				if _, err := w.Write(chunk.GetData()); err == nil {
					kept = append(kept, w)
				} else {
					w.Close()
				}
			}
			live = kept
		}
	}()
}

func (f *stdinFeed) closeWriters() {
	for _, w := range f.writers {
		w.Close()
	}
}

// close stops the feed and closes every pipe; closing a pipe wakes a write
// blocked on a worker that never read.
func (f *stdinFeed) close() {
	if f == nil {
		return
	}
	for _, r := range f.readers {
		r.Close()
	}
	f.closeWriters()
	if f.cancel != nil {
		f.cancel()
		<-f.done
	}
}
