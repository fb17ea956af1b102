package tcpstore

import (
	"bufio"
	"bytes"
	"runtime"
	"testing"
)

// TestDeclaredLengthCostsNothing: a value that claims 8 MiB and sends a few
// bytes costs what arrived, not what it claimed: many such connections
// cannot run the agent out of memory.
func TestDeclaredLengthCostsNothing(t *testing.T) {
	tests := []struct {
		name string
		sent []byte
		want int // bytes read, or -1 for an error
	}{
		{"claims 8 MiB, sends 10 bytes", append(query{}.u64(MaxValueBytes), "0123456789"...), -1},
		{"small, whole", query{}.str("abc"), 3},
		{"a bit over 512, whole", query{}.str(string(make([]byte, 600))), 600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := &request{r: bufio.NewReader(bytes.NewReader(tt.sent)), budget: MaxRequestBytes}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b, err := q.value()
			runtime.ReadMemStats(&after)
			switch {
			case tt.want < 0 && err == nil:
				t.Fatalf("read %d bytes of a cut value without an error", len(b))
			case tt.want >= 0 && (err != nil || len(b) != tt.want):
				t.Fatalf("read %d bytes, %v; want %d", len(b), err, tt.want)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<10 {
				t.Fatalf("allocated %d bytes", grew)
			}
		})
	}
}
