package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// errStdinClosed says nobody will read more of a job's stdin: the job ended,
// or every reader left.
var errStdinClosed = errors.New("stdin closed: the job ended or its stdin ranks stopped reading")

// stdinRelay carries a job's stdin from its launcher to the agents that run
// its stdin ranks (one agent, or every agent of the job for --stdin all). It
// holds at most stdinChunks chunks, so a huge stdin never sits in the store;
// an agent whose worker does not read slows the launcher's stdin and nothing
// else.
type stdinRelay struct {
	mu      sync.Mutex
	chunks  [][]byte // chunks[i] has sequence number first+i
	first   uint64
	eof     bool // the launcher's stdin ended
	closed  bool // the job ended
	pending bool // its readers are not known yet: the job waits for nodes
	writer  bool // a launcher attached
	readers map[string]*stdinReader
	wake    chan struct{} // closed and replaced on every change
}

type stdinReader struct {
	next   uint64 // sequence number of the next chunk it reads
	active bool   // a stream reads now
	gone   bool   // it stopped; it no longer holds the writer back
}

// newStdinRelay expects one reader for each of sessions; with none, the
// readers are named later (expect), and the launcher's first chunks wait.
func newStdinRelay(sessions []string) *stdinRelay {
	r := &stdinRelay{readers: map[string]*stdinReader{}, wake: make(chan struct{}), pending: len(sessions) == 0}
	for _, s := range sessions {
		r.readers[s] = &stdinReader{}
	}
	return r
}

// expect names the relay's readers once the job's round has its nodes.
func (r *stdinRelay) expect(sessions []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range sessions {
		r.readers[s] = &stdinReader{}
	}
	r.pending = false
	r.changedLocked()
}

func (r *stdinRelay) changedLocked() {
	close(r.wake)
	r.wake = make(chan struct{})
}

// trimLocked drops the chunks every remaining reader has read.
func (r *stdinRelay) trimLocked() {
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

func (r *stdinRelay) liveReadersLocked() int {
	n := 0
	for _, rd := range r.readers {
		if !rd.gone {
			n++
		}
	}
	return n
}

// attachWriter lets one launcher write the job's stdin.
func (r *stdinRelay) attachWriter() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writer {
		return errors.New("the job's stdin is already being written")
	}
	r.writer = true
	return nil
}

// write adds a chunk, waiting while the store holds stdinChunks that some
// reader has yet to read. It returns errStdinClosed once nobody will read.
func (r *stdinRelay) write(ctx context.Context, data []byte) error {
	for {
		r.mu.Lock()
		if r.closed || !r.pending && r.liveReadersLocked() == 0 {
			r.mu.Unlock()
			return errStdinClosed
		}
		if len(r.chunks) < stdinChunks {
			r.chunks = append(r.chunks, data)
			r.changedLocked()
			r.mu.Unlock()
			return nil
		}
		wake := r.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// closeWrite ends the stdin: readers get io.EOF after the last chunk.
func (r *stdinRelay) closeWrite() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eof = true
	r.changedLocked()
}

// openReader starts session's one reading of the stdin.
func (r *stdinRelay) openReader(session string) error {
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

// read returns session's next chunk, waiting for one; io.EOF after the
// last, errStdinClosed when the job ended.
func (r *stdinRelay) read(ctx context.Context, session string) ([]byte, error) {
	for {
		r.mu.Lock()
		rd := r.readers[session]
		if r.closed {
			r.mu.Unlock()
			return nil, errStdinClosed
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
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// leave ends session's reading: it no longer holds the writer back.
func (r *stdinRelay) leave(session string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rd := r.readers[session]
	rd.active, rd.gone = false, true
	r.trimLocked()
	r.changedLocked()
}

// close ends the relay with its job: writer and readers stop.
func (r *stdinRelay) close() {
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
func (s *Store) StdinWriter(jobID string) (*stdinRelay, error) {
	r, err := s.stdinOf(jobID)
	if err != nil {
		return nil, err
	}
	return r, r.attachWriter()
}

// StdinReader is the relay of a job's stdin, for the agent of session to
// read; it must call leave when done.
func (s *Store) StdinReader(session, jobID string) (*stdinRelay, error) {
	r, err := s.stdinOf(jobID)
	if err != nil {
		return nil, err
	}
	return r, r.openReader(session)
}

func (s *Store) stdinOf(jobID string) (*stdinRelay, error) {
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

// WriteStdin relays a launcher's stdin into its job.
func (s *Server) WriteStdin(stream musterv1.Jobs_WriteStdinServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	relay, err := s.store.StdinWriter(first.GetJobId())
	if err != nil {
		return rpcError(err)
	}
	defer relay.closeWrite()
	for chunk := first; ; {
		if n := len(chunk.GetData()); n > MaxStdinChunk {
			return status.Errorf(codes.InvalidArgument, "stdin chunk of %d bytes, more than %d", n, MaxStdinChunk)
		}
		if len(chunk.GetData()) > 0 {
			if err := relay.write(stream.Context(), chunk.GetData()); errors.Is(err, errStdinClosed) {
				// Nobody reads on: the launcher may stop sending.
				return stream.SendAndClose(&musterv1.WriteStdinResponse{})
			} else if err != nil {
				return rpcError(err)
			}
		}
		if chunk, err = stream.Recv(); err == io.EOF {
			return stream.SendAndClose(&musterv1.WriteStdinResponse{})
		} else if err != nil {
			return err
		}
	}
}

// ReadStdin streams a job's stdin to an agent that runs a stdin rank; the
// stream ends after the last chunk.
func (s *Server) ReadStdin(req *musterv1.ReadStdinRequest, stream musterv1.Agents_ReadStdinServer) error {
	relay, err := s.store.StdinReader(req.GetSession(), req.GetJobId())
	if err != nil {
		return rpcError(err)
	}
	defer relay.leave(req.GetSession())
	for {
		data, err := relay.read(stream.Context(), req.GetSession())
		switch {
		case err == io.EOF:
			return nil
		case errors.Is(err, errStdinClosed):
			return status.Error(codes.Aborted, err.Error())
		case err != nil:
			return rpcError(err)
		}
		if err := stream.Send(&musterv1.StdinChunk{Data: data}); err != nil {
			return err
		}
	}
}
