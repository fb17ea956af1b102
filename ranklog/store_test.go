package ranklog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func open(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "logs")
	}
	s, err := Open(zap.NewNop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readAll returns what Read sends, as "rank stream seq data" lines.
func readAll(t *testing.T, s *Store, job string, opt ReadOptions) []string {
	t.Helper()
	var got []string
	err := s.Read(context.Background(), job, opt, func(rank int, recs []Record) error {
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%d %d %d %q", rank, r.Stream, r.Seq, r.Data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestReadBack(t *testing.T) {
	s := open(t, Config{})
	w0, err := s.Rank("j-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	w1, _ := s.Rank("j-1", 1)
	w0.Append(Stdout, []byte("a\nb\n"), false)
	w0.Append(Stderr, []byte("err\n"), false)
	w1.Append(Stdout, []byte("one\n"), false)
	w0.Append(Stdout, []byte("c"), true)
	w0.Close()
	w1.Close()
	tests := []struct {
		name string
		opt  ReadOptions
		want string
	}{
		{"all", ReadOptions{Rank: -1, Tail: -1}, `0 1 1 "a\nb\n"|0 2 1 "err\n"|0 1 2 "c"|1 1 1 "one\n"`},
		{"one rank", ReadOptions{Rank: 1, Tail: -1}, `1 1 1 "one\n"`},
		{"tail 2", ReadOptions{Rank: 0, Tail: 2}, `0 2 1 "err\n"|0 1 2 "c"`},
		{"tail 3 cuts a record", ReadOptions{Rank: 0, Tail: 3}, `0 1 1 "b\n"|0 2 1 "err\n"|0 1 2 "c"`},
		{"tail 0", ReadOptions{Rank: 0, Tail: 0}, ``},
		{"tail past the start", ReadOptions{Rank: 0, Tail: 100}, `0 1 1 "a\nb\n"|0 2 1 "err\n"|0 1 2 "c"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(readAll(t, s, "j-1", tt.opt), "|"); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	if err := s.Read(context.Background(), "j-2", ReadOptions{Rank: -1, Tail: -1}, nil); !errors.Is(err, ErrNotKept) {
		t.Errorf("an unknown job: %v", err)
	}
	// A later round on this node goes on numbering.
	w0, _ = s.Rank("j-1", 0)
	w0.Append(Stderr, []byte("again\n"), false)
	w0.Close()
	if got := readAll(t, s, "j-1", ReadOptions{Rank: 0, Tail: 1}); len(got) != 1 || got[0] != `0 2 2 "again\n"` {
		t.Errorf("next round: %v", got)
	}
}

// A follower gets what is written while it follows, and returns when the
// job's last writer closes.
func TestFollow(t *testing.T) {
	s := open(t, Config{})
	w, _ := s.Rank("j-1", 3)
	w.Append(Stdout, []byte("before\n"), false)
	lines := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- s.Read(context.Background(), "j-1", ReadOptions{Rank: -1, Tail: -1, Follow: true}, func(rank int, recs []Record) error {
			for _, r := range recs {
				lines <- string(r.Data)
			}
			return nil
		})
	}()
	if got := <-lines; got != "before\n" {
		t.Fatalf("first: %q", got)
	}
	for i := range 50 {
		w.Append(Stdout, fmt.Appendf(nil, "line %d\n", i), false)
		if got, want := <-lines, fmt.Sprintf("line %d\n", i); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	w.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not return after the job ended")
	}
}

// The size bound drops the oldest ended jobs first, and output of a
// running job that does not fit is counted, not kept; the age bound drops
// old jobs when the store opens.
func TestBounds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	line := bytes.Repeat([]byte("x"), 999)
	line = append(line, '\n')
	s := open(t, Config{Dir: dir, MaxBytes: 10 << 10})
	for _, job := range []string{"j-old", "j-new"} {
		w, _ := s.Rank(job, 0)
		for range 4 {
			w.Append(Stdout, line, false)
		}
		w.Close()
	}
	w, _ := s.Rank("j-live", 0)
	for range 11 {
		w.Append(Stdout, line, false)
	}
	if _, err := os.Stat(filepath.Join(dir, "j-old")); !os.IsNotExist(err) {
		t.Errorf("the oldest job's output is kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "j-new")); !os.IsNotExist(err) {
		t.Errorf("the newer ended job's output is kept: %v", err)
	}
	if w.Dropped() == 0 {
		t.Error("nothing dropped past the bound")
	}
	// What is kept says where it stops, once.
	kept := readAll(t, s, "j-live", ReadOptions{Rank: 0, Tail: -1})
	if n := strings.Count(strings.Join(kept, "|"), "the rest of rank 0's output is not kept"); n != 1 || !strings.Contains(kept[len(kept)-1], "not kept") {
		t.Errorf("the kept output names its end %d times, last %q", n, kept[len(kept)-1])
	}
	w.Close()
	old := time.Now().Add(-8 * 24 * time.Hour)
	os.Chtimes(filepath.Join(dir, "j-live", "rank-0"), old, old)
	open(t, Config{Dir: dir})
	if _, err := os.Stat(filepath.Join(dir, "j-live")); !os.IsNotExist(err) {
		t.Errorf("a job older than the age bound is kept: %v", err)
	}
}

func FuzzReadRecords(f *testing.F) {
	f.Add(appendRecord(appendRecord(nil, Record{Stream: Stdout, Seq: 1, Data: []byte("a\n")}), Record{Stream: Stderr, Seq: 1, Paused: true, Data: []byte("b")}))
	f.Add([]byte{0, 0, 0, 18, 1, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReader(bytes.NewReader(b))
		var again []byte
		for {
			r, _, err := readRecord(br)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v", err)
				}
				break
			}
			if len(r.Data) > MaxData || (r.Stream != Stdout && r.Stream != Stderr) {
				t.Fatalf("record out of bounds: %d bytes, stream %d", len(r.Data), r.Stream)
			}
			again = appendRecord(again, r)
		}
		// What was read encodes back to the bytes it came from.
		if !bytes.HasPrefix(b, again) {
			t.Fatalf("re-encoded records differ from their input")
		}
	})
}
