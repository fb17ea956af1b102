package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// Bounds on relaying a job's stdin.
const (
	// MaxStdinChunk is the most bytes one StdinChunk may carry.
	MaxStdinChunk = 64 << 10
	// stdinChunks is how many chunks the store holds for a job: the
	// launcher waits while the slowest reader is that far behind.
	stdinChunks = 8
)

// ErrStdinClosed says nobody will read more of a job's stdin: the job ended,
// or every reader left.
var ErrStdinClosed = errors.New("stdin closed: the job ended or its stdin ranks stopped reading")

// StdinRelay carries a job's stdin from its launcher to the agents that run
// its stdin ranks (one agent, or every agent of the job for --stdin all). It
// holds at most stdinChunks chunks, so a huge stdin never sits in the store;
// an agent whose worker does not read slows the launcher's stdin and nothing
// else.
type StdinRelay struct {
	mu      sync.Mutex
	chunks  [][]byte // chunks[i] has sequence number first+i
	first   uint64
	eof     bool // the launcher's stdin ended
	closed  bool // the job ended
	pending bool // its readers are not known yet: the job waits for nodes
	writer  bool // a launcher attached
	readers map[string]*stdinReader
	wake    chan struct{} // closed and replaced on every change
	// Reads and Writes waiting for a change, for tests.
	waitingReads, waitingWrites atomic.Int32
}

type stdinReader struct {
	next   uint64 // sequence number of the next chunk it reads
	active bool   // a stream reads now
	gone   bool   // it stopped; it no longer holds the writer back
}

// newStdinRelay expects one reader for each of sessions; with none, the
// readers are named later (expect), and the launcher's first chunks wait.
func newStdinRelay(sessions []string) *StdinRelay {
	r := &StdinRelay{readers: map[string]*stdinReader{}, wake: make(chan struct{}), pending: len(sessions) == 0}
	for _, s := range sessions {
		r.readers[s] = &stdinReader{}
	}
	return r
}

// expect names the relay's readers once the job's round has its nodes.
func (r *StdinRelay) expect(sessions []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range sessions {
		r.readers[s] = &stdinReader{}
	}
	r.pending = false
	r.changedLocked()
}

func (r *StdinRelay) changedLocked() {
	close(r.wake)
	r.wake = make(chan struct{})
}

// trimLocked drops the chunks every remaining reader has read.
func (r *StdinRelay) trimLocked() {
	low := r.first + uint64(len(r.chunks))
	for _, rd := range r.readers {
		if !rd.gone {
			low = min(low, rd.next)
		}
	}
	for r.first < low {
		r.chunks[0] = nil
		r.chunks = r.chunks[1:]
		r.first++
	}
}

func (r *StdinRelay) liveReadersLocked() int {
	n := 0
	for _, rd := range r.readers {
		if !rd.gone {
			n++
		}
	}
	return n
}

// attachWriter lets one launcher write the job's stdin.
func (r *StdinRelay) attachWriter() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writer {
		return errors.New("the job's stdin is already being written")
	}
	r.writer = true
	return nil
}

// Write adds a chunk, waiting while the store holds stdinChunks that some
// reader has yet to read. It returns ErrStdinClosed once nobody will read.
func (r *StdinRelay) Write(ctx context.Context, data []byte) error {
	for {
		r.mu.Lock()
		if r.closed || !r.pending && r.liveReadersLocked() == 0 {
			r.mu.Unlock()
			return ErrStdinClosed
		}
		if len(r.chunks) < stdinChunks {
			r.chunks = append(r.chunks, data)
			r.changedLocked()
			r.mu.Unlock()
			return nil
		}
		wake := r.wake
		r.mu.Unlock()
		r.waitingWrites.Add(1)
		select {
		case <-wake:
		case <-ctx.Done():
			r.waitingWrites.Add(-1)
			return ctx.Err()
		}
		r.waitingWrites.Add(-1)
	}
}

// CloseWrite ends the stdin: readers get io.EOF after the last chunk.
func (r *StdinRelay) CloseWrite() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eof = true
	r.changedLocked()
}

// openReader starts session's one reading of the stdin.
func (r *StdinRelay) openReader(session string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rd := r.readers[session]
	switch {
	case rd == nil:
		return errors.New("this node runs no stdin rank of the job")
	case rd.active || rd.gone:
		return errors.New("this node already read the job's stdin")
	}
	rd.active = true
	return nil
}

// Read returns session's next chunk, waiting for one; io.EOF after the
// last, ErrStdinClosed when the job ended.
func (r *StdinRelay) Read(ctx context.Context, session string) ([]byte, error) {
	for {
		r.mu.Lock()
		rd := r.readers[session]
		if r.closed {
			r.mu.Unlock()
			return nil, ErrStdinClosed
		}
		if rd.next < r.first+uint64(len(r.chunks)) {
			data := r.chunks[rd.next-r.first]
			rd.next++
			r.trimLocked()
			r.changedLocked()
			r.mu.Unlock()
			return data, nil
		}
		if r.eof {
			r.mu.Unlock()
			return nil, io.EOF
		}
		wake := r.wake
		r.mu.Unlock()
		r.waitingReads.Add(1)
		select {
		case <-wake:
		case <-ctx.Done():
			r.waitingReads.Add(-1)
			return nil, ctx.Err()
		}
		r.waitingReads.Add(-1)
	}
}

// Leave ends session's reading: it no longer holds the writer back.
func (r *StdinRelay) Leave(session string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rd := r.readers[session]
	rd.active, rd.gone = false, true
	r.trimLocked()
	r.changedLocked()
}

// close ends the relay with its job: writer and readers stop.
func (r *StdinRelay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.chunks = nil
		r.changedLocked()
	}
}

// stdinSessionsLocked are the sessions of the nodes that run spec's stdin
// ranks in round rd.
func stdinSessionsLocked(spec *musterv1.JobSpec, rd *round) []string {
	var sessions []string
	switch {
	case spec.GetStdinAll():
		for _, n := range rd.nodes {
			sessions = append(sessions, n.session)
		}
	case spec.StdinRank != nil:
		sessions = append(sessions, rd.nodes[nodeOf(spec.GetStdinRank(), rd.nproc)].session)
	}
	return sessions
}

// StdinWriter is the relay of a job's stdin, for its launcher to write.
func (s *Store) StdinWriter(jobID string) (*StdinRelay, error) {
	r, err := s.stdinOf(jobID)
	if err != nil {
		return nil, err
	}
	return r, r.attachWriter()
}

// StdinReader is the relay of a job's stdin, for the agent of session to
// read; it must call leave when done.
func (s *Store) StdinReader(session, jobID string) (*StdinRelay, error) {
	r, err := s.stdinOf(jobID)
	if err != nil {
		return nil, err
	}
	return r, r.openReader(session)
}

func (s *Store) stdinOf(jobID string) (*StdinRelay, error) {
	s.mu.Lock()
	j := s.jobs[jobID]
	s.mu.Unlock()
	switch {
	case j == nil:
		return nil, fmt.Errorf("job %q: %w", jobID, ErrNotFound)
	case j.stdin == nil:
		return nil, fmt.Errorf("job %s: no rank reads stdin (--stdin none)", jobID)
	}
	return j.stdin, nil
}
