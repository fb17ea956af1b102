package rendezvous

import (
	"context"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

func outputEvent(line string) *musterv1.JobEvent {
	return &musterv1.JobEvent{Event: &musterv1.JobEvent_Output{Output: &musterv1.Output{Data: []byte(line)}}}
}

func TestEventLogVersionsAndBounds(t *testing.T) {
	tests := []struct {
		name      string
		maxCount  int
		maxBytes  int
		appended  int
		from      uint64
		wantFirst uint64
		wantLost  uint64
		wantN     int
	}{
		{"all kept", 100, 1 << 20, 10, 1, 1, 0, 10},
		{"read from middle", 100, 1 << 20, 10, 4, 4, 0, 7},
		{"count bound drops oldest", 5, 1 << 20, 10, 1, 6, 5, 5},
		{"byte bound drops oldest", 100, 3 * (10 + eventOverhead), 10, 1, 8, 7, 3},
		{"from zero means one", 100, 1 << 20, 3, 0, 1, 0, 3},
		{"past the end", 100, 1 << 20, 3, 9, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newEventLog(tt.maxCount, tt.maxBytes)
			for i := 0; i < tt.appended; i++ {
				l.append("j", time.Now(), outputEvent("0123456789"))
			}
			evs, lost, _, done, _ := l.read(tt.from, 1000)
			if done {
				t.Error("done before close")
			}
			if lost != tt.wantLost || len(evs) != tt.wantN {
				t.Fatalf("lost=%d n=%d, want lost=%d n=%d", lost, len(evs), tt.wantLost, tt.wantN)
			}
			for i, ev := range evs {
				if ev.Version != tt.wantFirst+uint64(i) || ev.JobId != "j" {
					t.Fatalf("event %d: version %d job %q", i, ev.Version, ev.JobId)
				}
			}
		})
	}
}

func TestEventLogCloseAndWake(t *testing.T) {
	l := newEventLog(10, 1<<20)
	_, _, _, _, wake := l.read(1, 10)
	l.append("j", time.Now(), outputEvent("a"))
	select {
	case <-wake:
	default:
		t.Fatal("append did not wake the reader")
	}
	l.close()
	l.append("j", time.Now(), outputEvent("after close"))
	evs, _, _, done, _ := l.read(1, 10)
	if len(evs) != 1 || !done {
		t.Fatalf("after close: %d events, done=%v", len(evs), done)
	}
	if evs, _, _, done, _ := l.read(1, 0); len(evs) != 0 || done {
		t.Fatal("a read of zero events claimed the log was finished")
	}
}

func TestEventLogTrim(t *testing.T) {
	l := newEventLog(100, 1<<20)
	for i := 0; i < 10; i++ {
		l.append("j", time.Now(), outputEvent("x"))
	}
	l.close()
	l.trim(3)
	evs, lost, _, done, _ := l.read(1, 100)
	if lost != 7 || len(evs) != 3 || evs[0].Version != 8 || !done {
		t.Fatalf("after trim: lost %d, %d events from %d, done %v", lost, len(evs), evs[0].Version, done)
	}
}

func TestEventLogFlowControl(t *testing.T) {
	const chunk = 1000
	size := chunk + eventOverhead
	data := string(make([]byte, chunk))
	l := newEventLog(1000, 4*size)
	id := l.follow(1)
	for i := 0; i < 4; i++ {
		l.append("j", time.Now(), outputEvent(data))
	}
	// The follower has read nothing: a fifth event must wait.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.waitRoom(ctx, size); err == nil {
		t.Fatal("publisher not held back by an unread follower")
	}
	got := make(chan error, 1)
	go func() { got <- l.waitRoom(context.Background(), size) }()
	l.advance(id, 2)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Nothing unread is ever dropped while followed.
	for i := 0; i < 10; i++ {
		l.append("j", time.Now(), outputEvent(data))
	}
	if evs, lost, _, _, _ := l.read(2, 100); lost != 0 || len(evs) != 13 {
		t.Fatalf("lost %d, %d events", lost, len(evs))
	}
	// Nobody following: no wait, and the oldest go.
	l.unfollow(id)
	if err := l.waitRoom(context.Background(), size); err != nil {
		t.Fatal(err)
	}
	if _, lost, lostBytes, _, _ := l.read(1, 100); lost == 0 || lostBytes == 0 {
		t.Fatalf("unfollowed log kept everything: lost %d (%d bytes)", lost, lostBytes)
	}
}

func TestEventLogWaitsForTheFirstFollower(t *testing.T) {
	l := newEventLog(1000, 2*(1+eventOverhead))
	l.expectFollower(100 * time.Millisecond)
	l.append("j", time.Now(), outputEvent("a"))
	l.append("j", time.Now(), outputEvent("b"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if l.waitRoom(ctx, 1+eventOverhead) == nil {
		t.Fatal("output before the launcher follows was not held")
	}
	// The launcher never came: output flows again.
	if err := l.waitRoom(context.Background(), 1+eventOverhead); err != nil {
		t.Fatal(err)
	}
}
