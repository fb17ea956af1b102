// Package torcherror reads the error file a PyTorch worker writes when its
// main, wrapped in torch.distributed.elastic's @record, raises: the
// exception's type and message and the last frames of its traceback, for
// the job's summary, as torchrun shows them.
package torcherror

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Bounds on what is read and kept of an error file.
const (
	MaxFileBytes   = 256 << 10
	MaxFrames      = 4
	maxMessageLen  = 2 << 10
	maxLineLen     = 512
	maxTracebackLn = 4096
)

// Error is a worker's exception as @record wrote it.
type Error struct {
	// Type is the exception's class name ("ValueError"); Message what
	// follows it.
	Type, Message string
	// Frames are the traceback's last frames, innermost last, each as its
	// "File ..., line N, in F" line and, when there is one, its source line.
	Frames []string
	// Time is when it was written, by the worker's clock; zero if unknown.
	Time time.Time
}

// file is the JSON @record writes (ErrorHandler.record_exception).
type file struct {
	Message struct {
		Message   string `json:"message"`
		ExtraInfo struct {
			PyCallstack string `json:"py_callstack"`
			Timestamp   string `json:"timestamp"`
		} `json:"extraInfo"`
	} `json:"message"`
}

// Parse reads an error file's contents; an error says what is wrong with it.
func Parse(b []byte) (*Error, error) {
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("error file of %d bytes, more than %d", len(b), MaxFileBytes)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("error file: %w", err)
	}
	msg := clean(f.Message.Message, maxMessageLen)
	if msg == "" {
		return nil, errors.New("error file: no message")
	}
	e := &Error{Message: msg}
	if typ, rest, ok := strings.Cut(msg, ": "); ok && isName(typ) {
		e.Type, e.Message = typ, rest
	} else if typ := strings.TrimSuffix(msg, ":"); isName(typ) {
		e.Type, e.Message = typ, "" // "KeyboardInterrupt: ", trimmed
	}
	e.Frames = lastFrames(f.Message.ExtraInfo.PyCallstack)
	var secs int64
	if _, err := fmt.Sscanf(f.Message.ExtraInfo.Timestamp, "%d", &secs); err == nil && secs > 0 {
		e.Time = time.Unix(secs, 0)
	}
	return e, nil
}

// isName says s is a Python class name, dotted or not.
func isName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// lastFrames are the last MaxFrames frames of a Python traceback: each
// "File" line, with the source line under it when there is one.
func lastFrames(tb string) []string {
	lines := strings.Split(tb, "\n")
	if len(lines) > maxTracebackLn {
		lines = lines[len(lines)-maxTracebackLn:]
	}
	var frames []string
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "File \"") {
			continue
		}
		frame := clean(l, maxLineLen)
		if i+1 < len(lines) {
			if src := strings.TrimSpace(lines[i+1]); src != "" && !strings.HasPrefix(src, "File \"") && !strings.HasPrefix(src, "Traceback") &&
				!strings.HasPrefix(src, "^") {
				frame += ": " + clean(src, maxLineLen)
			}
		}
		frames = append(frames, frame)
	}
	return frames[max(0, len(frames)-MaxFrames):]
}

// clean is s as valid UTF-8 without control characters, cut to n bytes.
func clean(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || r == '\r' {
			return ' '
		}
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > n {
		s = s[:n]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

// OpenFlags open an error file without following a link in its last
// component or waiting on a pipe: the worker's user owns its directory.
const OpenFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY

// Read reads an error file opened with OpenFlags if a worker that started
// at since wrote it: a regular file of at most MaxFileBytes. It returns nil,
// nil for an earlier round's file.
func Read(f *os.File, since time.Time) (*Error, error) {
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s: not a regular file", f.Name())
	case st.ModTime().Before(since.Truncate(time.Second)):
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	return Parse(b)
}
