package rendezvous

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// eventOverhead is what an event costs in memory beyond its output bytes:
// bounds count real bytes, not protobuf sizes.
const eventOverhead = 256

// firstFollowerWait is how long a new job's output waits for its launcher to
// start following it before the store stops holding publishers back.
const firstFollowerWait = 10 * time.Second

func eventSize(ev *musterv1.JobEvent) int {
	if o := ev.GetOutput(); o != nil {
		return len(o.GetData()) + eventOverhead
	}
	return proto.Size(ev) + eventOverhead
}

// eventLog is one job's versioned events. Output is flow-controlled: while
// anyone follows the job (or its launcher is about to), what followers have
// not read is bounded in bytes and publishers wait for room, so a slow
// reader slows the workers as a terminal does. With nobody following, the
// oldest events go once past the bounds, and a later follower is told how
// many it lost.
type eventLog struct {
	mu       sync.Mutex
	events   []*musterv1.JobEvent // events[0] has version first
	ends     []uint64             // ends[i]: bytes appended up to events[i]
	base     uint64               // bytes appended before events[0]
	total    uint64               // bytes ever appended
	first    uint64               // version of events[0]
	next     uint64               // version the next event gets
	maxBytes int
	maxCount int
	closed   bool
	wake     chan struct{} // closed and replaced on every append

	followers map[int]uint64 // follower -> next version it reads
	nextID    int
	awaiting  bool          // the job's first follower has not come yet
	room      chan struct{} // closed and replaced when followers advance or leave
}

func newEventLog(maxCount, maxBytes int) *eventLog {
	return &eventLog{first: 1, next: 1, maxCount: maxCount, maxBytes: maxBytes, wake: make(chan struct{}),
		followers: map[int]uint64{}, room: make(chan struct{})}
}

// expectFollower holds publishers back until a follower comes, or for at
// most wait: the launcher that submitted a job follows it a moment later.
func (l *eventLog) expectFollower(wait time.Duration) {
	l.mu.Lock()
	l.awaiting = true
	l.mu.Unlock()
	time.AfterFunc(wait, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.awaiting {
			l.awaiting = false
			l.trimLocked()
			l.roomLocked()
		}
	})
}

// append stamps the events with the job's next versions and the time at,
// and stores them.
// Events appended after close are dropped: the final event is the last.
func (l *eventLog) append(jobID string, at time.Time, evs ...*musterv1.JobEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	now := at.UnixMicro()
	for _, ev := range evs {
		ev.JobId = jobID
		ev.Version = l.next
		ev.TimeUnixUs = now
		l.next++
		l.total += uint64(eventSize(ev))
		l.events = append(l.events, ev)
		l.ends = append(l.ends, l.total)
	}
	l.trimLocked()
	close(l.wake)
	l.wake = make(chan struct{})
}

// held reports whether unread events must be kept and publishers held back.
func (l *eventLog) held() bool { return len(l.followers) > 0 || l.awaiting }

// oldestUnread is the lowest version a follower has yet to read.
func (l *eventLog) oldestUnread() uint64 {
	v := l.next
	if l.awaiting {
		v = l.first
	}
	for _, pos := range l.followers {
		v = min(v, max(pos, l.first))
	}
	return v
}

func (l *eventLog) bytesBefore(v uint64) uint64 {
	if v <= l.first {
		return l.base
	}
	return l.ends[v-l.first-1]
}

// unreadLocked is how many bytes followers have yet to read.
func (l *eventLog) unreadLocked() uint64 { return l.total - l.bytesBefore(l.oldestUnread()) }

// keepReadBytes is how much output followers have read that a followed job
// keeps, for a second follower that comes late.
const keepReadBytes = 1 << 20

// trimLocked drops the oldest events past the bounds, but never one that a
// follower has yet to read. While followed, what was read is kept only up
// to keepReadBytes: memory goes to what is still on its way.
func (l *eventLog) trimLocked() {
	keepFrom, limit := l.next, uint64(l.maxBytes)
	if l.held() {
		keepFrom = l.oldestUnread()
		limit = l.unreadLocked() + keepReadBytes
	}
	for len(l.events) > 1 && l.first < keepFrom &&
		(len(l.events) > l.maxCount || l.total-l.base > limit) {
		l.dropFirstLocked()
	}
}

func (l *eventLog) dropFirstLocked() {
	l.base = l.ends[0]
	l.events[0] = nil
	l.events = l.events[1:]
	l.ends = l.ends[1:]
	l.first++
}

func (l *eventLog) roomLocked() {
	close(l.room)
	l.room = make(chan struct{})
}

// waitRoom returns once n more bytes of output fit: followers have read
// enough, or nobody follows, or the log is closed, or ctx ended. A single
// batch larger than the bound still goes through when nothing is unread.
func (l *eventLog) waitRoom(ctx context.Context, n int) error {
	for {
		l.mu.Lock()
		unread := l.unreadLocked()
		if l.closed || !l.held() || unread == 0 || unread+uint64(n) <= uint64(l.maxBytes) {
			l.mu.Unlock()
			return nil
		}
		room := l.room
		l.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// follow registers a follower; its reads then hold events and publishers.
func (l *eventLog) follow(from uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextID++
	l.followers[l.nextID] = max(from, 1)
	l.awaiting = false
	return l.nextID
}

// advance records that a follower has read every version before next.
func (l *eventLog) advance(id int, next uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.followers[id]; ok {
		l.followers[id] = next
		l.trimLocked()
		l.roomLocked()
	}
}

// unfollow removes a follower.
func (l *eventLog) unfollow(id int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.followers, id)
	l.trimLocked()
	l.roomLocked()
}

// trim drops all but the last keep events.
func (l *eventLog) trim(keep int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.events) > keep {
		l.dropFirstLocked()
	}
	l.events = append([]*musterv1.JobEvent(nil), l.events...)
	l.ends = append([]uint64(nil), l.ends...)
}

// close marks the log complete after a final append.
func (l *eventLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
		l.roomLocked()
	}
}

// read returns up to max events from version from on, how many events and
// bytes before them were dropped, whether the log is complete with nothing
// after them, and a channel closed when more may be read.
func (l *eventLog) read(from uint64, max int) (evs []*musterv1.JobEvent, lost, lostBytes uint64, done bool, wake <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if from < 1 {
		from = 1
	}
	if from < l.first {
		lost = l.first - from
		if from == 1 {
			lostBytes = l.base
		}
		from = l.first
	}
	if from < l.next {
		i := int(from - l.first)
		n := min(len(l.events)-i, max)
		evs = append(evs, l.events[i:i+n]...)
		from += uint64(n)
	}
	return evs, lost, lostBytes, l.closed && from >= l.next, l.wake
}

// drained says whether the log is complete and every follower has read it.
func (l *eventLog) drained() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		return false
	}
	for _, pos := range l.followers {
		if pos < l.next {
			return false
		}
	}
	return true
}
