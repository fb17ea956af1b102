package agent

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/storeclient"
)

// Fencing. The agent renews its node's lease with the store every
// renewEvery; once it has not renewed for the store's fence bound it stops
// every job's workers itself, as failed for that reason. The store, which
// lost the node then, starts no round of those jobs before the bound has
// passed since the node's last renewal: no rank runs twice, even when the
// network splits the node from its store. A store restarted within the
// bound loses no running job: the agent registers again, which renews the
// lease, and the store takes its jobs over.

const (
	renewEvery   = time.Second
	renewTimeout = 2 * time.Second
	// leaseCheckEvery is how often the lease's end is looked at, apart
	// from renewals that may hang for renewTimeout: the fence comes within
	// this of the bound, well inside the store's margin.
	leaseCheckEvery = 100 * time.Millisecond
)

// lease is what the agent knows of its node's lease.
type lease struct {
	mu sync.Mutex
	// ok is when the last renewal the store answered was sent: the store
	// took it no earlier, so its view of the lease ends no earlier.
	ok time.Time
	// after is the store's fence bound; 0 fences nothing (a store that
	// does not say).
	after  time.Duration
	fenced bool // the workers were stopped for it, since the last renewal
}

// renewed records a renewal (or a registration) sent at sent, which the
// store answered.
func (l *lease) renewed(sent time.Time, after time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent.After(l.ok) {
		l.ok = sent
	}
	if after > 0 {
		l.after = after
	}
	l.fenced = false
}

// expired says for how long the store has not been reached when that is
// past the bound and the workers are not yet stopped for it.
func (l *lease) expired() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	since := time.Since(l.ok)
	if l.after <= 0 || l.fenced || since < l.after {
		return since, false
	}
	l.fenced = true
	return since, true
}

// keepLease renews the lease every renewEvery until the agent closes, one
// renewal at a time, and fences the node's jobs as soon as it runs out.
func (a *Agent) keepLease() {
	defer a.loops.Done()
	t := time.NewTicker(leaseCheckEvery)
	defer t.Stop()
	renewing := make(chan error, 1)
	renewing <- nil // none in flight
	var sent time.Time
	lastErr := "no renewal answered"
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		if since, fence := a.lease.expired(); fence {
			a.fence(since, lastErr)
		}
		if time.Since(sent) < renewEvery {
			continue
		}
		select {
		case err := <-renewing:
			if err != nil {
				lastErr = storeclient.ErrorMessage(err)
			}
		default:
			continue // the last renewal is still waiting for its answer
		}
		sent = time.Now()
		a.loops.Add(1)
		go func(sent time.Time) {
			defer a.loops.Done()
			ctx, cancel := context.WithTimeout(a.ctx, renewTimeout)
			_, err := a.client.Renew(ctx, &musterv1.RenewRequest{Session: a.sessionID()})
			cancel()
			if err == nil {
				a.lease.renewed(sent, 0)
			}
			renewing <- err
		}(sent)
	}
}

// fence stops every job's workers here: the store may run their ranks
// again elsewhere.
func (a *Agent) fence(since time.Duration, why string) {
	jobs := a.jobCount()
	if jobs == 0 {
		return
	}
	a.log.Warn("lease expired; stopping this node's jobs", zap.Int("jobs", jobs), zap.Duration("since", since), zap.String("error", why))
	// Each job's workers get its own --kill-timeout.
	a.stopAll(time.Duration(math.MaxInt64), fmt.Sprintf("node %s lost contact with the store for %.1f s (%s): "+
		"its workers are stopped, as the store may run their ranks again elsewhere", a.cfg.Name, since.Seconds(), why))
}
