package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Limits bound what a Memory keeps: every network input is bounded.
type Limits struct {
	KeyBytes   int // longest key
	ValueBytes int // largest value, and largest queue
	Keys       int // keys and non-empty queues, in every space together
	TotalBytes int // bytes of keys, values and queued items, in every space together
	// BinaryKeys lets keys be any bytes, empty included, as PyTorch's
	// TCPStore allows; otherwise they are non-empty UTF-8 without NUL.
	BinaryKeys bool
	// Shared, when set, bounds the bytes of every Memory that shares it
	// together, on top of each one's TotalBytes.
	Shared *Budget
}

// ErrFull is what a write past a bound of keys or bytes fails with.
var ErrFull = errors.New("store full")

// Budget bounds the bytes of several Memories together: the stores of one
// process, so that many of them cannot take all its memory.
type Budget struct {
	max  int64
	what string // the Memories, for errors
	used atomic.Int64
}

// NewBudget allows max bytes in all; what names the stores for errors.
func NewBudget(max int64, what string) *Budget { return &Budget{max: max, what: what} }

// Used is how many bytes the Memories hold together.
func (b *Budget) Used() int64 { return b.used.Load() }

// The default bounds, for the store's KV service and PMI.
const (
	MaxKeyBytes     = 512
	MaxValueBytes   = 1 << 20
	maxKeys         = 100_000
	maxTotalBytes   = 256 << 20
	maxBarrierCount = 1 << 20
)

// DefaultLimits are NewMemory's.
var DefaultLimits = Limits{KeyBytes: MaxKeyBytes, ValueBytes: MaxValueBytes, Keys: maxKeys, TotalBytes: maxTotalBytes}

type entry struct {
	value   []byte
	version uint64
}

type barrier struct {
	count   int
	arrived map[string]bool
	done    chan struct{}
}

// keyWaiters is how waiters learn a key came: ready is closed when it does.
type keyWaiters struct {
	ready chan struct{}
	n     int // waiters holding ready; the entry goes when the last leaves
}

// Memory keeps every space in memory, bounded in keys and bytes in all.
type Memory struct {
	limits  Limits
	mu      sync.Mutex
	spaces  map[string]*space
	keys    int
	bytes   int
	version uint64
}

// NewMemory returns an empty store with DefaultLimits.
func NewMemory() *Memory { return NewMemoryWith(DefaultLimits) }

// NewMemoryWith returns an empty store with limits l.
func NewMemoryWith(l Limits) *Memory { return &Memory{limits: l, spaces: map[string]*space{}} }

// Keys is how many keys and non-empty queues m holds, in every space.
func (m *Memory) Keys() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keys
}

type space struct {
	m        *Memory
	scope    string
	entries  map[string]entry
	queues   map[string]*queue
	barriers map[string]*barrier
	waiters  map[string]*keyWaiters // by key not yet there
	dropped  chan struct{}
}

// Space returns scope's space, made on first use. A dropped scope's handle
// refuses everything.
func (m *Memory) Space(scope string) Space {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp := m.spaces[scope]
	if sp == nil {
		sp = &space{m: m, scope: scope, entries: map[string]entry{}, queues: map[string]*queue{},
			barriers: map[string]*barrier{}, waiters: map[string]*keyWaiters{}, dropped: make(chan struct{})}
		if checkName("scope", scope, DefaultLimits) == nil {
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
	for k, e := range sp.entries {
		m.growLocked(-(len(k) + len(e.value)))
	}
	for k, q := range sp.queues {
		m.growLocked(-(len(k) + q.bytes))
	}
	m.keys -= len(sp.entries) + len(sp.queues)
	delete(m.spaces, scope)
	close(sp.dropped)
}

func checkName(what, s string, l Limits) error {
	switch {
	case len(s) > l.KeyBytes:
		return fmt.Errorf("%s is %d bytes, more than %d", what, len(s), l.KeyBytes)
	case l.BinaryKeys:
		return nil
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s holds a NUL byte", what)
	}
	return nil
}

func (sp *space) checkKey(key string) error { return checkName("key", key, sp.m.limits) }

// live checks the space may be used; m.mu is held.
func (sp *space) live() error {
	if err := checkName("scope", sp.scope, DefaultLimits); err != nil {
		return err
	}
	select {
	case <-sp.dropped:
		return fmt.Errorf("scope %q: its job has ended", sp.scope)
	default:
		return nil
	}
}

// lockLive locks the store for an operation on key, or says why it may not
// run; the caller unlocks when it is nil.
func (sp *space) lockLive(key string) error {
	if err := sp.checkKey(key); err != nil {
		return err
	}
	sp.m.mu.Lock()
	if err := sp.live(); err != nil {
		sp.m.mu.Unlock()
		return err
	}
	return nil
}

// reserveLocked checks that the store may grow by one key (when newKey) and
// by grow bytes; m.mu is held.
func (m *Memory) reserveLocked(newKey bool, grow int) error {
	if newKey && m.keys >= m.limits.Keys {
		return fmt.Errorf("%w: store holds %d keys, its limit", ErrFull, m.limits.Keys)
	}
	if m.bytes+grow > m.limits.TotalBytes {
		return fmt.Errorf("%w: store holds %d bytes of keys and values, its limit", ErrFull, m.limits.TotalBytes)
	}
	if b := m.limits.Shared; b != nil && grow > 0 && b.used.Load()+int64(grow) > b.max {
		return fmt.Errorf("%w: %s hold %d bytes of keys and values together, their limit", ErrFull, b.what, b.max)
	}
	return nil
}

// growLocked counts n more bytes held (fewer when negative); m.mu is held.
func (m *Memory) growLocked(n int) {
	m.bytes += n
	if b := m.limits.Shared; b != nil {
		b.used.Add(int64(n))
	}
}

// putLocked stores value under key within the bounds; m.mu is held.
func (sp *space) putLocked(key string, value []byte) (uint64, error) {
	m := sp.m
	if len(value) > m.limits.ValueBytes {
		return 0, fmt.Errorf("value of %q is %d bytes, more than %d", key, len(value), m.limits.ValueBytes)
	}
	old, exists := sp.entries[key]
	grow := len(value) - len(old.value)
	if !exists {
		grow += len(key)
	}
	if err := m.reserveLocked(!exists, grow); err != nil {
		return 0, err
	}
	if !exists {
		m.keys++
	}
	m.version++
	m.growLocked(grow)
	sp.entries[key] = entry{value: bytes.Clone(value), version: m.version}
	sp.cameLocked(key)
	return m.version, nil
}

// cameLocked wakes those waiting for key; m.mu is held.
func (sp *space) cameLocked(key string) {
	if w := sp.waiters[key]; w != nil {
		close(w.ready)
		delete(sp.waiters, key)
	}
}

// presentLocked says whether key is set or its queue holds an item, which
// is what waiters wait for; m.mu is held.
func (sp *space) presentLocked(key string) bool {
	if _, ok := sp.entries[key]; ok {
		return true
	}
	return sp.queues[key] != nil
}

func (sp *space) Set(key string, value []byte) (uint64, error) {
	if err := sp.lockLive(key); err != nil {
		return 0, err
	}
	defer sp.m.mu.Unlock()
	return sp.putLocked(key, value)
}

func (sp *space) Get(ctx context.Context, key string, wait bool) ([]byte, uint64, error) {
	for {
		if err := sp.lockLive(key); err != nil {
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
	if err := sp.lockLive(key); err != nil {
		return 0, err
	}
	defer sp.m.mu.Unlock()
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

func (sp *space) Append(key string, value []byte) error {
	if err := sp.lockLive(key); err != nil {
		return err
	}
	defer sp.m.mu.Unlock()
	old := sp.entries[key].value
	if len(old)+len(value) > sp.m.limits.ValueBytes {
		return fmt.Errorf("value of %q would be %d bytes, more than %d", key, len(old)+len(value), sp.m.limits.ValueBytes)
	}
	_, err := sp.putLocked(key, append(bytes.Clone(old), value...))
	return err
}

func (sp *space) CompareAndSwap(key string, old, next []byte) ([]byte, bool, error) {
	if err := sp.lockLive(key); err != nil {
		return nil, false, err
	}
	defer sp.m.mu.Unlock()
	e, ok := sp.entries[key]
	if (!ok && len(old) == 0) || (ok && bytes.Equal(e.value, old)) {
		if _, err := sp.putLocked(key, next); err != nil {
			return nil, ok, err
		}
		return bytes.Clone(next), true, nil
	}
	return e.value, ok, nil
}

func (sp *space) Delete(key string) (bool, error) {
	if err := sp.lockLive(key); err != nil {
		return false, err
	}
	defer sp.m.mu.Unlock()
	e, ok := sp.entries[key]
	if ok {
		sp.m.growLocked(-(len(key) + len(e.value)))
		sp.m.keys--
		delete(sp.entries, key)
	}
	return ok, nil
}

func (sp *space) Has(keys ...string) (bool, error) {
	for _, k := range keys {
		if err := sp.checkKey(k); err != nil {
			return false, err
		}
	}
	sp.m.mu.Lock()
	defer sp.m.mu.Unlock()
	if err := sp.live(); err != nil {
		return false, err
	}
	for _, k := range keys {
		if !sp.presentLocked(k) {
			return false, nil
		}
	}
	return true, nil
}

func (sp *space) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := sp.checkKey(k); err != nil {
			return err
		}
	}
	for {
		sp.m.mu.Lock()
		if err := sp.live(); err != nil {
			sp.m.mu.Unlock()
			return err
		}
		missing, found := "", false
		for _, k := range keys {
			if !sp.presentLocked(k) {
				missing, found = k, true
				break
			}
		}
		if !found {
			sp.m.mu.Unlock()
			return nil
		}
		// Waiting on one missing key at a time wakes a waiter once per key
		// it needs, not on every change: thousands wait at once.
		w := sp.waiters[missing]
		if w == nil {
			w = &keyWaiters{ready: make(chan struct{})}
			sp.waiters[missing] = w
		}
		w.n++
		sp.m.mu.Unlock()
		select {
		case <-w.ready:
		case <-sp.dropped:
			// live reports it on the next turn.
		case <-ctx.Done():
			sp.m.mu.Lock()
			if w.n--; w.n == 0 && sp.waiters[missing] == w {
				delete(sp.waiters, missing)
			}
			sp.m.mu.Unlock()
			return fmt.Errorf("waiting for key %q: %w", missing, ctx.Err())
		}
	}
}

func (sp *space) Barrier(ctx context.Context, name, participant string, count int) error {
	if err := checkName("barrier name", name, DefaultLimits); err != nil {
		return err
	}
	if err := checkName("participant", participant, DefaultLimits); err != nil {
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
		if len(sp.barriers) >= sp.m.limits.Keys {
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
