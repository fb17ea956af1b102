package torcherror_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/torcherror"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		file, typ, message string
		frames             []string
	}{
		{"value_error.json", "ValueError", "batch 41 has 3 columns, want 4", []string{
			`File "/home/user/train.py", line 19, in write: main()`,
			`File "/home/user/train.py", line 16, in main: step(41)`,
			`File "/home/user/train.py", line 13, in step: return load(batch)`,
			`File "/home/user/train.py", line 10, in load: raise exc_type(text)`}},
		{"multiline.json", "RuntimeError", "CUDA error: out of memory Tried to allocate 2.00 GiB", nil},
		{"no_message.json", "KeyboardInterrupt", "", nil},
	} {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			e, err := torcherror.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if e.Type != tt.typ || e.Message != tt.message || len(e.Frames) != torcherror.MaxFrames || e.Time.IsZero() {
				t.Errorf("got %q %q, %d frames, time %v", e.Type, e.Message, len(e.Frames), e.Time)
			}
			if tt.frames != nil && !slices.Equal(e.Frames, tt.frames) {
				t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(e.Frames, "\n"), strings.Join(tt.frames, "\n"))
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for name, b := range map[string]string{
		"not JSON":   "Traceback (most recent call last):",
		"no message": `{"message": {"extraInfo": {}}}`,
		"too large":  `{"message": {"message": "` + strings.Repeat("x", torcherror.MaxFileBytes) + `"}}`,
	} {
		if _, err := torcherror.Parse([]byte(b)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// readFile opens path as the agent does, and reads it.
func readFile(path string, since time.Time) (*torcherror.Error, error) {
	f, err := os.OpenFile(path, torcherror.OpenFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return torcherror.Read(f, since)
}

// An error file is read only as a regular file written since the worker
// started: no link followed, no pipe waited on, nothing of an earlier round.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	good, _ := os.ReadFile("testdata/value_error.json")
	file := filepath.Join(dir, "error.json")
	os.WriteFile(file, good, 0o644)
	if e, err := readFile(file, time.Now().Add(-time.Minute)); err != nil || e == nil || e.Type != "ValueError" {
		t.Fatalf("a fresh file: %v, %v", e, err)
	}
	if e, err := readFile(file, time.Now().Add(time.Hour)); e != nil || err != nil {
		t.Errorf("a file older than the worker: %v, %v", e, err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(file, link)
	if _, err := readFile(link, time.Time{}); err == nil {
		t.Error("followed a link")
	}
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	if _, err := readFile(fifo, time.Time{}); err == nil {
		t.Error("read a pipe")
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"value_error.json", "multiline.json", "no_message.json"} {
		b, _ := os.ReadFile(filepath.Join("testdata", name))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := torcherror.Parse(b)
		if err != nil {
			return
		}
		if len(e.Frames) > torcherror.MaxFrames || len(e.Message) > 4<<10 {
			t.Fatalf("unbounded: %d frames, message of %d bytes", len(e.Frames), len(e.Message))
		}
	})
}
