package agent

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// Bounds on a job's events waiting for the store, in real bytes: output data
// plus what each event costs in memory beyond it.
const (
	publishBufferBytes = 4 << 20
	publishBatchBytes  = 1 << 20
	eventOverhead      = 256
)

// jobPublisher sends one job's events to the store in order and in batches,
// each event numbered (its sequence number among the job's events from this
// node), so that a batch sent again after a lost answer is applied once.
// Every event is sent until the store acknowledges it, across lost
// connections and a restarted store, while the agent runs.
//
// Its buffer is bounded: when the store holds back (the job's launcher reads
// slowly), publish blocks, and so do the workers' pipes. One job's slow
// reader never holds up another job. While no store takes events at all,
// output beyond the buffer is dropped and counted instead (the workers go
// on; their --log-dir files are complete), and the store is told how much
// once it is back. Starts and exits are never dropped.
type jobPublisher struct {
	ctx     context.Context // ends when the agent closes
	log     *zap.Logger
	client  *storeclient.Client
	session func() string
	job     string

	mu        sync.Mutex
	queue     []queued
	bytes     int
	seq       uint64 // the last sequence number given
	acked     uint64 // the highest the store acknowledged
	failing   bool   // the last send failed: no store takes events
	lostCount uint64 // output dropped while failing, not yet reported
	lostBytes uint64
	closing   bool
	aborted   bool
	dropped   int
	room      chan struct{} // closed and replaced when bytes were sent
	more      chan struct{} // a send is wanted
	done      chan struct{}
}

type queued struct {
	ev  *musterv1.JobEvent
	seq uint64
}

func newJobPublisher(ctx context.Context, log *zap.Logger, c *storeclient.Client, session func() string, job string) *jobPublisher {
	return &jobPublisher{ctx: ctx, log: log, client: c, session: session, job: job,
		room: make(chan struct{}), more: make(chan struct{}, 1), done: make(chan struct{})}
}

func eventBytes(ev *musterv1.JobEvent) int {
	return len(ev.GetOutput().GetData()) + eventOverhead
}

// publish queues an event and returns its sequence number, or 0 when it was
// dropped. Output waits while the buffer is full and a store takes events.
func (p *jobPublisher) publish(ev *musterv1.JobEvent) uint64 {
	n := eventBytes(ev)
	output := ev.GetOutput() != nil
	for {
		p.mu.Lock()
		if p.aborted {
			p.dropped++
			p.mu.Unlock()
			return 0
		}
		if !output || p.bytes == 0 || p.bytes+n <= publishBufferBytes {
			seq := p.queueLocked(ev)
			p.mu.Unlock()
			p.wake()
			return seq
		}
		if p.failing {
			p.lostCount++
			p.lostBytes += uint64(len(ev.GetOutput().GetData()))
			p.mu.Unlock()
			return 0
		}
		room := p.room
		p.mu.Unlock()
		<-room
	}
}

func (p *jobPublisher) queueLocked(ev *musterv1.JobEvent) uint64 {
	p.seq++
	p.queue = append(p.queue, queued{ev: ev, seq: p.seq})
	p.bytes += eventBytes(ev)
	return p.seq
}

func (p *jobPublisher) wake() {
	select {
	case p.more <- struct{}{}:
	default:
	}
}

func (p *jobPublisher) roomLocked() {
	close(p.room)
	p.room = make(chan struct{})
}

// ackedSeq is the highest sequence number the store acknowledged.
func (p *jobPublisher) ackedSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked
}

// run sends until close is called and the queue is empty, or the agent
// closes.
func (p *jobPublisher) run() {
	defer close(p.done)
	ctx := p.ctx
	for {
		p.mu.Lock()
		var batch []queued
		size := 0
		for len(p.queue) > 0 && size < publishBatchBytes {
			size += eventBytes(p.queue[0].ev)
			batch = append(batch, p.queue[0])
			p.queue[0] = queued{}
			p.queue = p.queue[1:]
		}
		closing := p.closing
		p.mu.Unlock()
		if len(batch) == 0 {
			if closing {
				return
			}
			select {
			case <-p.more:
			case <-ctx.Done():
				p.abort()
				return
			}
			continue
		}
		if !p.send(ctx, batch) {
			p.abort()
			return
		}
		p.mu.Lock()
		p.bytes -= size
		if p.lostCount > 0 {
			// The store hears of what it never got, after what it got.
			p.queueLocked(&musterv1.JobEvent{JobId: p.job, Event: &musterv1.JobEvent_Lost{Lost: &musterv1.OutputLost{
				Events: p.lostCount, Bytes: p.lostBytes}}})
			p.log.Warn("job output dropped while no store took it", zap.String("job", p.job),
				zap.Uint64("events", p.lostCount), zap.Uint64("bytes", p.lostBytes))
			p.lostCount, p.lostBytes = 0, 0
		}
		p.roomLocked()
		p.mu.Unlock()
	}
}

// send delivers a batch, retrying with the same sequence numbers while no
// store answers (the agent registers again meanwhile, perhaps with a
// restarted store). A batch the store refuses is sent again event by event,
// and only the events refused alone are dropped. It gives up when ctx ends
// or the store no longer knows the job.
func (p *jobPublisher) send(ctx context.Context, batch []queued) bool {
	backoff := 50 * time.Millisecond
	evs := make([]*musterv1.JobEvent, len(batch))
	for i, q := range batch {
		evs[i] = q.ev
	}
	for {
		resp, err := p.client.Publish(ctx, &musterv1.PublishRequest{Session: p.session(), Events: evs, FirstSeq: batch[0].seq})
		if err == nil {
			p.mu.Lock()
			p.acked = max(p.acked, resp.GetAckedSeq(), batch[len(batch)-1].seq)
			p.failing = false
			p.mu.Unlock()
			return true
		}
		switch status.Code(err) {
		case codes.InvalidArgument:
			if len(batch) > 1 {
				for _, q := range batch {
					if !p.send(ctx, []queued{q}) {
						return false
					}
				}
				return true
			}
			p.log.Error("store refused a job event", zap.String("job", p.job), zap.Uint64("seq", batch[0].seq), zap.Error(err))
			p.mu.Lock()
			p.dropped++
			p.mu.Unlock()
			return true
		case codes.NotFound, codes.FailedPrecondition, codes.PermissionDenied:
			p.log.Warn("store refused job events", zap.String("job", p.job), zap.Int("events", len(batch)), zap.Error(err))
			p.mu.Lock()
			p.dropped += len(batch)
			p.mu.Unlock()
			return false
		}
		p.mu.Lock()
		if !p.failing {
			p.failing = true
			p.roomLocked() // output waiting for room is dropped instead
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.dropped += len(batch)
			p.mu.Unlock()
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// abort drops what is queued and all later events, and wakes waiters.
func (p *jobPublisher) abort() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.aborted {
		return
	}
	p.aborted = true
	p.dropped += len(p.queue)
	p.queue = nil
	p.bytes = 0
	p.roomLocked()
	if p.dropped > 0 {
		p.log.Warn("job events not delivered to the store", zap.String("job", p.job), zap.Int("events", p.dropped))
	}
}

// close waits until every queued event was sent, or the agent closes; what
// is then left is dropped and counted.
func (p *jobPublisher) close() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.wake()
	<-p.done
}
