package kv

import "fmt"

// queue is one key's list of items, first in first out. A space holds a
// queue only while it is non-empty, which is when waiters see its key.
type queue struct {
	items [][]byte
	bytes int
}

func (sp *space) Push(key string, value []byte) error {
	if err := sp.lockLive(key); err != nil {
		return err
	}
	defer sp.m.mu.Unlock()
	m := sp.m
	q := sp.queues[key]
	held := 0
	if q != nil {
		held = q.bytes
	}
	if held+len(value) > m.limits.ValueBytes {
		return fmt.Errorf("queue %q would hold %d bytes, more than %d", key, held+len(value), m.limits.ValueBytes)
	}
	grow := len(value)
	if q == nil {
		grow += len(key)
	}
	if err := m.reserveLocked(q == nil, grow); err != nil {
		return err
	}
	if q == nil {
		q = &queue{}
		sp.queues[key] = q
		m.keys++
		m.growLocked(len(key))
	}
	q.items = append(q.items, append([]byte(nil), value...))
	q.bytes += len(value)
	m.growLocked(len(value))
	sp.cameLocked(key)
	return nil
}

func (sp *space) Pop(key string) ([]byte, int, error) {
	if err := sp.lockLive(key); err != nil {
		return nil, 0, err
	}
	defer sp.m.mu.Unlock()
	q := sp.queues[key]
	if q == nil {
		return nil, 0, nil
	}
	n := len(q.items)
	v := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	q.bytes -= len(v)
	sp.m.growLocked(-len(v))
	if len(q.items) == 0 {
		delete(sp.queues, key)
		sp.m.keys--
		sp.m.growLocked(-len(key))
	}
	return v, n, nil
}

func (sp *space) QueueLen(key string) (int, error) {
	if err := sp.lockLive(key); err != nil {
		return 0, err
	}
	defer sp.m.mu.Unlock()
	if q := sp.queues[key]; q != nil {
		return len(q.items), nil
	}
	return 0, nil
}
