package agent

import (
	"bytes"
	"os"
	"sync"
	"syscall"

	"github.com/musterhq/muster/ownfile"
)

// A failure summary keeps the last lines of the failed rank's stderr.
const (
	tailLines     = 20
	tailLineBytes = 1024
)

// tail keeps the last lines written to it, each cut to tailLineBytes.
type tail struct {
	mu    sync.Mutex
	lines []string
	open  bool // the last line has not ended yet
}

func (t *tail) add(data []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(data) > 0 {
		piece, rest, ended := bytes.Cut(data, []byte{'\n'})
		data = rest
		if t.open {
			last := t.lines[len(t.lines)-1]
			room := max(tailLineBytes-len(last), 0)
			t.lines[len(t.lines)-1] = last + string(piece[:min(len(piece), room)])
		} else {
			t.lines = append(t.lines, string(piece[:min(len(piece), tailLineBytes)]))
		}
		t.open = !ended
		if len(t.lines) > tailLines {
			t.lines = t.lines[len(t.lines)-tailLines:]
		}
	}
}

// get returns the lines as valid UTF-8, as protobuf strings must be.
func (t *tail) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, len(t.lines))
	for i, l := range t.lines {
		out[i] = validText(l)
	}
	return out
}

// logFile is one of a rank's files under --log-dir, one per stream. Each
// chunk is written at once, so the file is complete whatever happens to the
// launcher.
type logFile struct {
	mu  sync.Mutex
	f   *os.File
	err error
}

// openLogFile opens a rank's file as the job's user (cred; nil for the
// agent's own), appending: a restart's round writes after the last one's,
// and nothing is ever truncated. It never follows a link or waits on a FIFO,
// and takes only the user's own regular file.
func openLogFile(path string, cred *syscall.Credential) (*logFile, error) {
	var f *os.File
	err := asUser(cred, func() error {
		var err error
		f, err = ownfile.OpenAppend(path, 0o644, credUID(cred))
		return err
	})
	if err != nil {
		return nil, err
	}
	return &logFile{f: f}, nil
}

func (l *logFile) write(data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		_, l.err = l.f.Write(data)
	}
}

// incomplete says why the file misses some output; "" when it does not.
func (l *logFile) incomplete() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		return ""
	}
	return validText(l.err.Error())
}

// Close closes the file and returns the first error writing it.
func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Close(); l.err == nil {
		l.err = err
	}
	return l.err
}
