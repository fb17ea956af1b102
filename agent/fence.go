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
	renewEvery = time.Second
	// renewTimeout is how long a renewal waits for its answer. An answer
	// that comes late still counts from when its renewal was sent, so a
	// slow path (packet loss, TCP's retransmission backoff) is no reason
	// to give up on one: only the fence bound is.
	renewTimeout = 10 * time.Second
	// maxRenewing bounds the renewals waiting for an answer at once: on a
	// lossy link one gets through while another is being retransmitted.
	maxRenewing = 4
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
	// A late answer to a renewal sent before the lease ran out does not
	// make it live again.
	if l.after <= 0 || time.Since(l.ok) < l.after {
		l.fenced = false
	}
}

// expired says for how long the store has not been reached when that is
// past the bound and the workers are not yet stopped for it.
func (l *lease) expired() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	since := time.Since(l.ok)
	return since, l.after > 0 && !l.fenced && since >= l.after
}

// fencedNow records that the workers were stopped for the lease's end.
func (l *lease) fencedNow() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fenced = true
}

// keepLease renews the lease every renewEvery until the agent closes, with
// at most maxRenewing renewals waiting for their answers, and fences the
// node's jobs as soon as it runs out.
func (a *Agent) keepLease() {
	defer a.loops.Done()
	t := time.NewTicker(leaseCheckEvery)
	defer t.Stop()
	answers := make(chan error, maxRenewing)
	renewing := 0
	var sent time.Time
	lastErr := "no renewal answered"
	for {
		select {
		case <-a.ctx.Done():
			return
		case err := <-answers:
			renewing--
			if err != nil {
				lastErr = storeclient.ErrorMessage(err)
			}
			continue
		case <-t.C:
		}
		// A job that starts after the lease ran out is fenced as well.
		if since, fence := a.lease.expired(); fence && a.fence(since, lastErr) {
			a.lease.fencedNow()
		}
		if time.Since(sent) < renewEvery || renewing == maxRenewing {
			continue
		}
		sent = time.Now()
		renewing++
		a.loops.Add(1)
		go func(sent time.Time) {
			defer a.loops.Done()
			ctx, cancel := context.WithTimeout(a.ctx, renewTimeout)
			_, err := a.client.Renew(ctx, &musterv1.RenewRequest{Session: a.sessionID()})
			cancel()
			if err == nil {
				a.lease.renewed(sent, 0)
			}
			answers <- err
		}(sent)
	}
}

// fence stops every job's workers here, as the store may run their ranks
// again elsewhere, and says whether there were any.
func (a *Agent) fence(since time.Duration, why string) bool {
	jobs := a.jobCount()
	if jobs == 0 {
		return false
	}
	a.log.Warn("lease expired; stopping this node's jobs", zap.Int("jobs", jobs), zap.Duration("since", since), zap.String("error", why))
	// Each job's workers get its own --kill-timeout.
	a.stopAll(time.Duration(math.MaxInt64), fmt.Sprintf("node %s lost contact with the store for %.1f s (%s): "+
		"its workers are stopped, as the store may run their ranks again elsewhere", a.cfg.Name, since.Seconds(), why))
	return true
}
