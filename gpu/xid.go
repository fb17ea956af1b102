package gpu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// XIDEvent is one XID error a GPU reported: the driver's word that the GPU
// failed (fell off the bus, an uncorrectable ECC error, a page fault).
type XIDEvent struct {
	GPU int // NVML's index
	XID int32
	At  time.Time
}

// XIDSource yields XID errors as the GPUs report them. Next blocks until
// one comes or ctx ends.
type XIDSource interface {
	Next(ctx context.Context) (XIDEvent, error)
	Close()
}

// xidLogSize bounds the errors an XIDLog keeps: a GPU that floods XIDs
// must not grow the agent.
const xidLogSize = 1024

// XIDLog keeps the GPUs' recent XID errors, so that a worker's end can be
// laid at the door of an error on one of its GPUs while it ran.
type XIDLog struct {
	mu     sync.Mutex
	events []XIDEvent // the latest xidLogSize, oldest first
}

// Run records src's errors until ctx ends or src fails, and closes src.
func (l *XIDLog) Run(ctx context.Context, src XIDSource) error {
	defer src.Close()
	for {
		ev, err := src.Next(ctx)
		if err != nil {
			return err
		}
		l.Add(ev)
	}
}

// Add records one error.
func (l *XIDLog) Add(ev XIDEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == xidLogSize {
		l.events = append(l.events[:0], l.events[1:]...)
	}
	l.events = append(l.events, ev)
}

// Since lists the errors of gpus reported at or after from, oldest first.
func (l *XIDLog) Since(gpus []int, from time.Time) []XIDEvent {
	if l == nil || len(gpus) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []XIDEvent
	for _, ev := range l.events {
		if ev.At.Before(from) {
			continue
		}
		for _, g := range gpus {
			if ev.GPU == g {
				out = append(out, ev)
				break
			}
		}
	}
	return out
}

// nvmlXIDs is NVML's event set for the critical XID errors of some GPUs.
type nvmlXIDs struct {
	lib nvml.Interface
	set nvml.EventSet
}

// WatchXIDs registers for the critical XID errors of the GPUs of indices
// with NVML. An error says why it cannot (no driver, a GPU that does not
// report events).
func WatchXIDs(indices []int) (src XIDSource, err error) {
	defer func() {
		if r := recover(); r != nil {
			src, err = nil, fmt.Errorf("nvml: %v", r)
		}
	}()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: %s", nvml.ErrorString(ret))
	}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("nvml: event set: %s", nvml.ErrorString(ret))
	}
	for _, i := range indices {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret == nvml.SUCCESS {
			ret = d.RegisterEvents(nvml.EventTypeXidCriticalError, set)
		}
		if ret != nvml.SUCCESS {
			set.Free()
			lib.Shutdown()
			return nil, fmt.Errorf("nvml: XID events of GPU %d: %s", i, nvml.ErrorString(ret))
		}
	}
	return &nvmlXIDs{lib: lib, set: set}, nil
}

// xidPoll is how long one wait in NVML lasts: how late Next sees its
// context end.
const xidPoll = 500 * time.Millisecond

func (x *nvmlXIDs) Next(ctx context.Context) (XIDEvent, error) {
	for ctx.Err() == nil {
		data, ret := x.set.Wait(uint32(xidPoll.Milliseconds()))
		switch ret {
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.SUCCESS:
		default:
			return XIDEvent{}, fmt.Errorf("nvml: wait for XID events: %s", nvml.ErrorString(ret))
		}
		if data.EventType != nvml.EventTypeXidCriticalError {
			continue
		}
		idx, ret := data.Device.GetIndex()
		if ret != nvml.SUCCESS {
			idx = -1
		}
		return XIDEvent{GPU: idx, XID: int32(data.EventData), At: time.Now()}, nil
	}
	return XIDEvent{}, ctx.Err()
}

func (x *nvmlXIDs) Close() {
	x.set.Free()
	x.lib.Shutdown()
}
