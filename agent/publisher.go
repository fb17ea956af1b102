package agent

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// Bounds on a job's events waiting for the store, in real bytes: output data
// plus what each event costs in memory beyond it.
const (
	publishBufferBytes = 4 << 20
	publishBatchBytes  = 1 << 20
	eventOverhead      = 256
)

// jobPublisher sends one job's events to the store in order and in batches.
// Its buffer is bounded: when the store holds back (the job's launcher reads
// slowly), publish blocks, and so do the workers' pipes. One job's slow
// reader never holds up another job.
type jobPublisher struct {
	ctx     context.Context // ends when the agent closes
	log     *zap.Logger
	client  *rendezvous.Client
	session string
	job     string

	mu      sync.Mutex
	queue   []*musterv1.JobEvent
	bytes   int
	closing bool
	aborted bool
	dropped int
	room    chan struct{} // closed and replaced when bytes were sent
	more    chan struct{} // a send is wanted
	done    chan struct{}
}

func newJobPublisher(ctx context.Context, log *zap.Logger, c *rendezvous.Client, session, job string) *jobPublisher {
	return &jobPublisher{ctx: ctx, log: log, client: c, session: session, job: job,
		room: make(chan struct{}), more: make(chan struct{}, 1), done: make(chan struct{})}
}

func eventBytes(ev *musterv1.JobEvent) int {
	return len(ev.GetOutput().GetData()) + eventOverhead
}

// publish queues an event, waiting while the buffer is full.
func (p *jobPublisher) publish(ev *musterv1.JobEvent) {
	n := eventBytes(ev)
	for {
		p.mu.Lock()
		if p.aborted {
			p.dropped++
			p.mu.Unlock()
			return
		}
		if p.bytes == 0 || p.bytes+n <= publishBufferBytes {
			p.queue = append(p.queue, ev)
			p.bytes += n
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
			return
		}
		room := p.room
		p.mu.Unlock()
		<-room
	}
}

// run sends until close is called and the queue is empty, or the agent
// closes.
func (p *jobPublisher) run() {
	defer close(p.done)
	ctx := p.ctx
	for {
		p.mu.Lock()
		var batch []*musterv1.JobEvent
		size := 0
		for len(p.queue) > 0 && size < publishBatchBytes {
			size += eventBytes(p.queue[0])
			batch = append(batch, p.queue[0])
			p.queue[0] = nil
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
		close(p.room)
		p.room = make(chan struct{})
		p.mu.Unlock()
	}
}

// send delivers a batch, retrying while the store is unreachable. It gives
// up when ctx ends or the store no longer knows the job.
func (p *jobPublisher) send(ctx context.Context, batch []*musterv1.JobEvent) bool {
	backoff := 50 * time.Millisecond
	for {
		_, err := p.client.Publish(ctx, &musterv1.PublishRequest{Session: p.session, Events: batch})
		if err == nil {
			return true
		}
		switch status.Code(err) {
		case codes.NotFound, codes.FailedPrecondition, codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied:
			p.log.Warn("store refused job events", zap.String("job", p.job), zap.Int("events", len(batch)), zap.Error(err))
			p.mu.Lock()
			p.dropped += len(batch)
			p.mu.Unlock()
			return false
		}
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.dropped += len(batch)
			p.mu.Unlock()
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
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
	close(p.room)
	p.room = make(chan struct{})
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
	select {
	case p.more <- struct{}{}:
	default:
	}
	<-p.done
}
