package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestWatchTick(t *testing.T) {
	for _, tc := range []struct {
		timeout, first, want time.Duration
	}{
		{100 * time.Millisecond, 100 * time.Millisecond, 10 * time.Millisecond},
		{time.Second, time.Second, 50 * time.Millisecond},
		{10 * time.Second, time.Second, 50 * time.Millisecond},
		{10 * time.Minute, 30 * time.Minute, 100 * time.Millisecond},
	} {
		if got := watchTick(tc.timeout, tc.first); got != tc.want {
			t.Errorf("watchTick(%s, %s) = %s, want %s", tc.timeout, tc.first, got, tc.want)
		}
	}
}

// pokePipe writes only to a FIFO someone reads: never to a regular file,
// through a link, or into a FIFO nobody holds open (which would block).
func TestPokePipe(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(fifo, link)
	for _, tc := range []struct {
		name, path string
		want       bool
	}{
		{"missing", filepath.Join(dir, "none"), false},
		{"regular file", file, false},
		{"fifo nobody reads", fifo, false},
	} {
		if got := pokePipe(tc.path); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if b, _ := os.ReadFile(file); len(b) != 0 {
		t.Errorf("the regular file got %q", b)
	}
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if pokePipe(link) {
		t.Error("wrote through a link")
	}
	if !pokePipe(fifo) {
		t.Fatal("a read FIFO was not written")
	}
	buf := make([]byte, 8)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "1" {
		t.Fatalf("the reader got %q, %v", buf[:n], err)
	}
}
