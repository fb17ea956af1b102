package agent

import (
	"time"

	"github.com/musterhq/muster/supervise"
)

// startWorkers gives back the round's ports, for the workers to bind, and
// starts the workers, unless a stop came first.
func (js *jobStart) startWorkers() error {
	s := js.sup
	js.releasePorts()
	js.spec.Grace, js.spec.Unkillable = s.killAt, unkillableAfter
	js.spec.JobDir, js.spec.Lock = js.files.dir, js.files.lock
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return errStopping
	}
	js.spec.Spare = js.a.takeSpare()
	now := time.Now()
	for _, w := range js.started {
		w.started = now
	}
	if js.hang != nil {
		js.hang.sup, js.hang.epoch = s, time.Now()
	}
	g, err := supervise.Start(js.spec)
	if err != nil {
		return err
	}
	s.group, js.group, s.started = g, g, time.Now()
	if js.hang != nil {
		s.watch = js.hang
		js.hang.start(js.started, g)
	}
	return nil
}
