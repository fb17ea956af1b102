package gpu

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeXIDs is an XIDSource fed by a test, as NVML's would be by the driver.
type fakeXIDs struct {
	events chan XIDEvent
	closed chan struct{}
}

func (f *fakeXIDs) Next(ctx context.Context) (XIDEvent, error) {
	select {
	case ev, ok := <-f.events:
		if !ok {
			return XIDEvent{}, errors.New("source gone")
		}
		return ev, nil
	case <-ctx.Done():
		return XIDEvent{}, ctx.Err()
	}
}

func (f *fakeXIDs) Close() { close(f.closed) }

func TestXIDLogAttributesByGPUAndTime(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 16, 0, 0, 0, time.UTC)
	src := &fakeXIDs{events: make(chan XIDEvent), closed: make(chan struct{})}
	var log XIDLog
	done := make(chan error, 1)
	go func() { done <- log.Run(context.Background(), src) }()
	for _, ev := range []XIDEvent{
		{GPU: 1, XID: 31, At: t0.Add(-time.Second)}, // before the worker started
		{GPU: 2, XID: 79, At: t0.Add(time.Second)},
		{GPU: 3, XID: 48, At: t0.Add(2 * time.Second)},
		{GPU: 2, XID: 45, At: t0.Add(3 * time.Second)},
	} {
		src.events <- ev
	}
	close(src.events)
	if err := <-done; err == nil {
		t.Fatal("Run did not return the source's end")
	}
	<-src.closed
	tests := []struct {
		name string
		gpus []int
		want []int32
	}{
		{"its own GPU's errors, in order", []int{2}, []int32{79, 45}},
		{"two GPUs", []int{1, 3}, []int32{48}},
		{"an error before it started is not its", []int{1}, nil},
		{"no GPUs", nil, nil},
		{"another GPU", []int{0}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int32
			for _, ev := range log.Since(tt.gpus, t0) {
				got = append(got, ev.XID)
			}
			if len(got) != len(tt.want) || (len(got) > 0 && !equal(got, tt.want)) {
				t.Fatalf("%v, want %v", got, tt.want)
			}
		})
	}
}

func equal(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func TestXIDLogIsBounded(t *testing.T) {
	var log XIDLog
	for i := 0; i < 3*xidLogSize; i++ {
		log.Add(XIDEvent{GPU: 0, XID: int32(i)})
	}
	evs := log.Since([]int{0}, time.Time{})
	if len(evs) != xidLogSize || evs[len(evs)-1].XID != 3*xidLogSize-1 {
		t.Fatalf("%d kept, the last %d", len(evs), evs[len(evs)-1].XID)
	}
	var none *XIDLog
	if none.Since([]int{0}, time.Time{}) != nil {
		t.Fatal("a nil log has errors")
	}
}

// WatchXIDs registers with NVML where there are GPUs (and then waits for
// errors until its context ends: a healthy GPU reports none), and says why
// it cannot where there are none.
func TestWatchXIDs(t *testing.T) {
	devs, err := Discover("")
	if err != nil || len(devs) == 0 {
		if src, err := WatchXIDs([]int{0}); err == nil {
			src.Close()
			t.Fatal("XID events without NVML")
		}
		return
	}
	var indices []int
	for _, d := range devs {
		indices = append(indices, d.Index)
	}
	src, err := WatchXIDs(indices)
	if err != nil {
		t.Fatalf("GPUs %v: %v", indices, err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*xidPoll)
	defer cancel()
	if ev, err := src.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %+v, %v; want no XID error before the deadline", ev, err)
	}
	t.Logf("GPUs %v: XID events registered", indices)
}
