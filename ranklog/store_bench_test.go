package ranklog

import (
	"bytes"
	"context"
	"testing"
)

// BenchmarkAppend is what keeping a rank's output costs per chunk read: one
// 4 KiB chunk of 80-byte lines, as a busy worker's pipe yields them.
func BenchmarkAppend(b *testing.B) {
	s := open(b, Config{MaxBytes: 1 << 40})
	w, err := s.Rank("j-bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	chunk := bytes.Repeat(append(bytes.Repeat([]byte("x"), 79), '\n'), 4096/80)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		w.Append(Stdout, chunk, false)
	}
}

// BenchmarkRead reads back a rank's 64 MiB of kept output.
func BenchmarkRead(b *testing.B) {
	s := open(b, Config{MaxBytes: 1 << 40})
	w, _ := s.Rank("j-bench", 0)
	chunk := bytes.Repeat(append(bytes.Repeat([]byte("x"), 79), '\n'), 4096/80)
	for range (64 << 20) / len(chunk) {
		w.Append(Stdout, chunk, false)
	}
	w.Close()
	b.SetBytes(int64((64 << 20) / len(chunk) * len(chunk)))
	for b.Loop() {
		if err := s.Read(context.Background(), "j-bench", ReadOptions{Rank: -1, Tail: -1}, func(int, []Record) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
