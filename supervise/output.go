package supervise

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// Output reading bounds.
const (
	// MaxChunk is the most output handed on at once; a longer line goes in
	// pieces of this size.
	MaxChunk = 64 << 10
	// PauseFlush is how long an unfinished line waits for its end before it
	// is handed on as it is (a progress bar drawn with \r).
	PauseFlush = 100 * time.Millisecond
)

// Emit receives output: whole lines ending in '\n', or a piece of a line
// (no '\n' at its end) that outgrew MaxChunk or, with paused set, that the
// worker left unfinished for PauseFlush. data is only valid during the call.
// Emit may block: the worker then blocks on its pipe, as behind a terminal.
type Emit func(data []byte, paused bool)

// ErrCut is returned by Read when Cut stopped it before the end.
var ErrCut = errors.New("output cut: a process still held the pipe")

// Reader reads one of a worker's pipes to its end.
type Reader struct {
	f   *os.File
	mu  sync.Mutex
	cut bool
	// terminal: f is a pseudo-terminal's master, whose end is EIO.
	terminal bool
}

// NewReader reads f, which must be pollable (a pipe from os.Pipe).
func NewReader(f *os.File) *Reader { return &Reader{f: f} }

// Cut makes Read return once the pipe holds nothing more to read now, for a
// writer that will never close it (a process that outlived SIGKILL).
func (r *Reader) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	r.f.SetReadDeadline(time.Now())
}

// Close closes a pipe that will not be read.
func (r *Reader) Close() error { return r.f.Close() }

// setDeadline bounds the next read: an unfinished line waits PauseFlush
// from its first byte, so that a bar redrawn many times a second still shows.
func (r *Reader) setDeadline(pending bool, since time.Time) (cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.cut:
		r.f.SetReadDeadline(time.Now())
	case pending:
		r.f.SetReadDeadline(since.Add(PauseFlush))
	default:
		r.f.SetReadDeadline(time.Time{})
	}
	return r.cut
}

// Read reads the pipe to its end, handing emit whole lines, and closes it.
func (r *Reader) Read(emit Emit) error {
	defer r.f.Close()
	// The buffer grows to MaxChunk only for a worker that writes that much
	// at once: hundreds of quiet workers, or a job's silent stderr, cost
	// little (a job's start allocates less, and seldom needs a GC cycle).
	buf := make([]byte, 512)
	n := 0
	var since time.Time // when the unfinished line in buf began
	for {
		cut := r.setDeadline(n > 0, since)
		m, err := r.f.Read(buf[n:])
		if m > 0 && n == 0 {
			since = time.Now()
		}
		n += m
		if m > 0 {
			filled := n == len(buf)
			if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
				emit(buf[:i+1], false)
				n = copy(buf, buf[i+1:n])
				since = time.Now()
			} else if n == MaxChunk {
				emit(buf[:n], false)
				n = 0
			}
			if filled && len(buf) < MaxChunk {
				grown := make([]byte, min(2*len(buf), MaxChunk))
				copy(grown, buf[:n])
				buf = grown
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded) && !cut:
			if n > 0 {
				emit(buf[:n], true)
				n = 0
			}
		default:
			if n > 0 {
				emit(buf[:n], false)
			}
			if errors.Is(err, io.EOF) || (r.terminal && errors.Is(err, syscall.EIO)) {
				return nil
			}
			if cut && errors.Is(err, os.ErrDeadlineExceeded) {
				return ErrCut
			}
			return err
		}
	}
}
