package agent

import (
	"bufio"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
)

// maxLine is the longest line sent as one event; longer lines arrive in
// pieces marked partial, so a worker printing without newlines stays bounded.
const maxLine = 64 << 10

// tailLines is how many stderr lines a failure summary keeps.
const (
	tailLines     = 20
	tailLineBytes = 1024
)

// lineSink receives a worker's output one line (or piece of a long line) at
// a time, newline removed.
type lineSink func(line []byte, partial bool)

// readLines reads r to its end, handing each line to sink.
func readLines(r io.Reader, sink lineSink) error {
	br := bufio.NewReaderSize(r, maxLine)
	inLine := false // a piece of the current line was sent as partial
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			sink(line[:len(line)-1], false)
			inLine = false
		case errors.Is(err, bufio.ErrBufferFull):
			sink(line, true)
			inLine = true
		default:
			// The end: finish a last line that had no newline.
			if len(line) > 0 || inLine {
				sink(line, false)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return err
		}
	}
}

// tail keeps the last lines written to it.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(line []byte, partial bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(line) > tailLineBytes {
		line = line[:tailLineBytes]
	}
	t.lines = append(t.lines, string(line))
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

func (t *tail) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}

// logFile is one rank's file under --log-dir, shared by its two streams.
type logFile struct {
	mu sync.Mutex
	w  *bufio.Writer
	f  *os.File
}

// openLogFile opens a rank's log file as the job's user (cred; nil for the
// agent's own).
func openLogFile(path string, cred *syscall.Credential) (*logFile, error) {
	f, err := openFileAs(cred, path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &logFile{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

func (l *logFile) add(line []byte, partial bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(line)
	if !partial {
		l.w.WriteByte('\n')
	}
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
