package rendezvous

import (
	"sync"

	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// eventLog is one job's versioned events, bounded in count and bytes so that
// a slow or absent watcher costs the store memory up to a limit, never the
// workers their speed: past the limit the oldest events are dropped and a
// late watcher is told how many it lost.
type eventLog struct {
	mu       sync.Mutex
	events   []*musterv1.JobEvent // events[0] has version first
	first    uint64               // version of events[0]
	next     uint64               // version the next event gets
	bytes    int
	maxBytes int
	maxCount int
	closed   bool
	wake     chan struct{} // closed and replaced on every append
}

func newEventLog(maxCount, maxBytes int) *eventLog {
	return &eventLog{first: 1, next: 1, maxCount: maxCount, maxBytes: maxBytes, wake: make(chan struct{})}
}

// append stamps the events with the job's next versions and stores them.
// Events appended after close are dropped: the final event is the last.
func (l *eventLog) append(jobID string, evs ...*musterv1.JobEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	for _, ev := range evs {
		ev.JobId = jobID
		ev.Version = l.next
		l.next++
		l.events = append(l.events, ev)
		l.bytes += proto.Size(ev)
	}
	for len(l.events) > 1 && (len(l.events) > l.maxCount || l.bytes > l.maxBytes) {
		l.bytes -= proto.Size(l.events[0])
		l.events[0] = nil
		l.events = l.events[1:]
		l.first++
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

// trim drops all but the last keep events.
func (l *eventLog) trim(keep int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.events) > keep {
		l.bytes -= proto.Size(l.events[0])
		l.events[0] = nil
		l.events = l.events[1:]
		l.first++
	}
	l.events = append([]*musterv1.JobEvent(nil), l.events...)
}

// close marks the log complete after a final append.
func (l *eventLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
}

// read returns up to max events from version from on, how many events
// before them were dropped, whether the log is complete with nothing after
// them, and a channel closed when more may be read.
func (l *eventLog) read(from uint64, max int) (evs []*musterv1.JobEvent, lost uint64, done bool, wake <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if from < 1 {
		from = 1
	}
	if from < l.first {
		lost = l.first - from
		from = l.first
	}
	if from < l.next {
		i := int(from - l.first)
		n := min(len(l.events)-i, max)
		evs = append(evs, l.events[i:i+n]...)
		from += uint64(n)
	}
	return evs, lost, l.closed && from >= l.next, l.wake
}
