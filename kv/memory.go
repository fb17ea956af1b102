package kv

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Bounds on what workers may keep: every network input is bounded.
const (
	MaxKeyBytes     = 512
	MaxValueBytes   = 1 << 20
	maxKeys         = 100_000
	maxTotalBytes   = 256 << 20
	maxBarrierCount = 1 << 20
)

type entry struct {
	value   []byte
	version uint64
}

type barrier struct {
	count   int
	arrived map[string]bool
	done    chan struct{}
}

// Memory keeps every space in memory, bounded in keys and bytes in all.
type Memory struct {
	mu      sync.Mutex
	spaces  map[string]*space
	keys    int
	bytes   int
	version uint64
}

// NewMemory returns an empty store.
func NewMemory() *Memory { return &Memory{spaces: map[string]*space{}} }

type space struct {
	m        *Memory
	scope    string
	entries  map[string]entry
	barriers map[string]*barrier
	wake     chan struct{} // closed and replaced on every change
	dropped  chan struct{}
}

// Space returns scope's space, made on first use. A dropped scope's handle
// refuses everything.
func (m *Memory) Space(scope string) Space {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp := m.spaces[scope]
	if sp == nil {
		sp = &space{m: m, scope: scope, entries: map[string]entry{}, barriers: map[string]*barrier{},
			wake: make(chan struct{}), dropped: make(chan struct{})}
		if checkName("scope", scope) == nil {
			m.spaces[scope] = sp
		}
	}
	return sp
}

// Drop forgets scope and wakes its waiters.
func (m *Memory) Drop(scope string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp := m.spaces[scope]
	if sp == nil {
		return
	}
	for _, e := range sp.entries {
		m.bytes -= len(e.value)
	}
	m.keys -= len(sp.entries)
	delete(m.spaces, scope)
	close(sp.dropped)
}

func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > MaxKeyBytes:
		return fmt.Errorf("%s is %d bytes, more than %d", what, len(s), MaxKeyBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for _, r := range s {
		if r == 0 {
			return fmt.Errorf("%s holds a NUL byte", what)
		}
	}
	return nil
}

// live checks the space may be used; m.mu is held.
func (sp *space) live() error {
	if err := checkName("scope", sp.scope); err != nil {
		return err
	}
	select {
	case <-sp.dropped:
		return fmt.Errorf("scope %q: its job has ended", sp.scope)
	default:
		return nil
	}
}

// putLocked stores value under key within the bounds; m.mu is held.
func (sp *space) putLocked(key string, value []byte) (uint64, error) {
	if len(value) > MaxValueBytes {
		return 0, fmt.Errorf("value of %q is %d bytes, more than %d", key, len(value), MaxValueBytes)
	}
	m := sp.m
	old, exists := sp.entries[key]
	if !exists && m.keys >= maxKeys {
		return 0, fmt.Errorf("store holds %d keys, its limit", maxKeys)
	}
	if m.bytes-len(old.value)+len(value) > maxTotalBytes {
		return 0, fmt.Errorf("store holds %d bytes of values, its limit", maxTotalBytes)
	}
	if !exists {
		m.keys++
	}
	m.version++
	m.bytes += len(value) - len(old.value)
	sp.entries[key] = entry{value: bytes.Clone(value), version: m.version}
	sp.changedLocked()
	return m.version, nil
}

func (sp *space) changedLocked() {
	close(sp.wake)
	sp.wake = make(chan struct{})
}

func (sp *space) Set(key string, value []byte) (uint64, error) {
	if err := checkName("key", key); err != nil {
		return 0, err
	}
	sp.m.mu.Lock()
	defer sp.m.mu.Unlock()
	if err := sp.live(); err != nil {
		return 0, err
	}
	return sp.putLocked(key, value)
}

func (sp *space) Get(ctx context.Context, key string, wait bool) ([]byte, uint64, error) {
	if err := checkName("key", key); err != nil {
		return nil, 0, err
	}
	for {
		sp.m.mu.Lock()
		if err := sp.live(); err != nil {
			sp.m.mu.Unlock()
			return nil, 0, err
		}
		e, ok := sp.entries[key]
		sp.m.mu.Unlock()
		if ok {
			return e.value, e.version, nil
		}
		if !wait {
			return nil, 0, ErrNotFound
		}
		// The key may go again before it is read: then wait once more.
		if err := sp.Wait(ctx, key); err != nil {
			return nil, 0, err
		}
	}
}

func (sp *space) Add(key string, delta int64) (int64, error) {
	if err := checkName("key", key); err != nil {
		return 0, err
	}
	sp.m.mu.Lock()
	defer sp.m.mu.Unlock()
	if err := sp.live(); err != nil {
		return 0, err
	}
	var n int64
	if e, ok := sp.entries[key]; ok {
		v, err := strconv.ParseInt(string(e.value), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("key %q does not hold an integer", key)
		}
		n = v
	}
	sum := n + delta
	if (delta > 0 && sum < n) || (delta < 0 && sum > n) {
		return 0, fmt.Errorf("key %q: %d + %d overflows", key, n, delta)
	}
	if _, err := sp.putLocked(key, strconv.AppendInt(nil, sum, 10)); err != nil {
		return 0, err
	}
	return sum, nil
}

func (sp *space) CompareAndSwap(key string, old, next []byte) ([]byte, error) {
	if err := checkName("key", key); err != nil {
		return nil, err
	}
	sp.m.mu.Lock()
	defer sp.m.mu.Unlock()
	if err := sp.live(); err != nil {
		return nil, err
	}
	e, ok := sp.entries[key]
	if (!ok && old == nil) || (ok && old != nil && bytes.Equal(e.value, old)) {
		if _, err := sp.putLocked(key, next); err != nil {
			return nil, err
		}
		return bytes.Clone(next), nil
	}
	return e.value, nil
}

func (sp *space) Delete(key string) (bool, error) {
	if err := checkName("key", key); err != nil {
		return false, err
	}
	sp.m.mu.Lock()
	defer sp.m.mu.Unlock()
	if err := sp.live(); err != nil {
		return false, err
	}
	e, ok := sp.entries[key]
	if ok {
		sp.m.bytes -= len(e.value)
		sp.m.keys--
		delete(sp.entries, key)
		sp.changedLocked()
	}
	return ok, nil
}

func (sp *space) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := checkName("key", k); err != nil {
			return err
		}
	}
	for {
		sp.m.mu.Lock()
		if err := sp.live(); err != nil {
			sp.m.mu.Unlock()
			return err
		}
		missing := ""
		for _, k := range keys {
			if _, ok := sp.entries[k]; !ok {
				missing = k
				break
			}
		}
		wake := sp.wake
		sp.m.mu.Unlock()
		if missing == "" {
			return nil
		}
		select {
		case <-wake:
		case <-sp.dropped:
		case <-ctx.Done():
			return fmt.Errorf("waiting for key %q: %w", missing, ctx.Err())
		}
	}
}

func (sp *space) Barrier(ctx context.Context, name, participant string, count int) error {
	if err := checkName("barrier name", name); err != nil {
		return err
	}
	if err := checkName("participant", participant); err != nil {
		return err
	}
	if count < 1 || count > maxBarrierCount {
		return fmt.Errorf("barrier %q: count %d is outside 1..%d", name, count, maxBarrierCount)
	}
	sp.m.mu.Lock()
	if err := sp.live(); err != nil {
		sp.m.mu.Unlock()
		return err
	}
	b := sp.barriers[name]
	if b == nil {
		if len(sp.barriers) >= maxKeys {
			sp.m.mu.Unlock()
			return fmt.Errorf("barrier %q: too many barriers", name)
		}
		b = &barrier{count: count, arrived: map[string]bool{}, done: make(chan struct{})}
		sp.barriers[name] = b
	}
	if b.count != count {
		sp.m.mu.Unlock()
		return fmt.Errorf("barrier %q: count %d differs from the %d it was created with", name, count, b.count)
	}
	if !b.arrived[participant] {
		b.arrived[participant] = true
		if len(b.arrived) == b.count {
			close(b.done)
		}
	}
	arrived := len(b.arrived)
	sp.m.mu.Unlock()
	select {
	case <-b.done:
		return nil
	case <-sp.dropped:
		return fmt.Errorf("barrier %q: its job has ended", name)
	case <-ctx.Done():
		return fmt.Errorf("barrier %q: %d of %d arrived: %w", name, arrived, count, ctx.Err())
	}
}

func (sp *space) Len() int {
	sp.m.mu.Lock()
	defer sp.m.mu.Unlock()
	return len(sp.entries)
}
