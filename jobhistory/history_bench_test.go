package jobhistory

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkApplyFinished is the cost of recording one job's end: one bbolt
// transaction (and its fsync) on a file holding DefaultMaxJobs jobs, the
// oldest forgotten each time.
func BenchmarkApplyFinished(b *testing.B) {
	h := Open(Config{Dir: b.TempDir(), MaxAge: 1000 * 24 * time.Hour, Now: func() time.Time { return epoch }})
	defer h.Close()
	for i := range DefaultMaxJobs {
		h.Apply(ended(fmt.Sprintf("j-fill-%d", i), i))
	}
	b.ResetTimer()
	for i := range b.N {
		h.Apply(ended(fmt.Sprintf("j-%d", i), DefaultMaxJobs+i))
	}
}

// BenchmarkOpen is a store's start with a full history: the file checked
// and every record read.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	h := Open(Config{Dir: dir, MaxAge: 1000 * 24 * time.Hour, Now: func() time.Time { return epoch }})
	for i := range DefaultMaxJobs {
		h.Apply(ended(fmt.Sprintf("j-fill-%d", i), i))
	}
	h.Close()
	b.ResetTimer()
	for range b.N {
		h := Open(Config{Dir: dir, MaxAge: 1000 * 24 * time.Hour, Now: func() time.Time { return epoch }})
		if len(h.List()) != DefaultMaxJobs {
			b.Fatal(len(h.List()))
		}
		h.Close()
	}
}
