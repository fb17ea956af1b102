package agent

import (
	"context"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// Bounds on batching events to the store.
const (
	publishQueue      = 16384
	publishBatch      = 2048
	publishBatchBytes = 4 << 20
)

// publisher sends job events to the store in order and in batches. Workers
// block on their pipes only if the store itself stops taking events; a slow
// launcher never holds them up, since the store buffers for it.
type publisher struct {
	log     *zap.Logger
	client  *rendezvous.Client
	session string
	queue   chan *musterv1.JobEvent
	closing chan struct{}
	done    chan struct{}
}

func newPublisher(log *zap.Logger, c *rendezvous.Client, session string) *publisher {
	return &publisher{log: log, client: c, session: session,
		queue: make(chan *musterv1.JobEvent, publishQueue), closing: make(chan struct{}), done: make(chan struct{})}
}

// publish queues an event; after close it drops it.
func (p *publisher) publish(ev *musterv1.JobEvent) {
	select {
	case p.queue <- ev:
	case <-p.closing:
	}
}

// run sends until close is called and the queue is drained.
func (p *publisher) run(ctx context.Context) {
	defer close(p.done)
	for {
		var ev *musterv1.JobEvent
		select {
		case ev = <-p.queue:
		case <-p.closing:
			select {
			case ev = <-p.queue:
			default:
				return
			}
		}
		batch := []*musterv1.JobEvent{ev}
		size := proto.Size(ev)
	fill:
		for len(batch) < publishBatch && size < publishBatchBytes {
			select {
			case ev := <-p.queue:
				batch = append(batch, ev)
				size += proto.Size(ev)
			default:
				break fill
			}
		}
		if _, err := p.client.Publish(ctx, &musterv1.PublishRequest{Session: p.session, Events: batch}); err != nil {
			p.log.Warn("publish failed", zap.Int("events", len(batch)), zap.Error(err))
		}
	}
}

// close stops taking events and waits until the queued ones were sent.
func (p *publisher) close() {
	close(p.closing)
	<-p.done
}
