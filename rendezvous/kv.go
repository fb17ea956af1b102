package rendezvous

import (
	"context"
	"fmt"
	"sync"
	"unicode/utf8"
)

// Limits on what workers may keep in the store: every network input is bounded.
const (
	maxKeyBytes     = 512
	maxValueBytes   = 1 << 20
	maxKVKeys       = 100_000
	maxKVTotalBytes = 256 << 20
	maxBarrierCount = 1 << 20
)

type kvEntry struct {
	value   []byte
	version uint64
}

// KV is the store's key-value space with waiting reads and barriers, scoped
// by a name (a job's ID, usually) so that jobs do not see each other's keys.
type KV struct {
	mu       sync.Mutex
	entries  map[string]kvEntry // scope + "\x00" + key
	bytes    int
	version  uint64
	wake     chan struct{}
	barriers map[string]*barrier
}

type barrier struct {
	count   int
	arrived map[string]bool
	done    chan struct{}
}

// NewKV returns an empty KV.
func NewKV() *KV {
	return &KV{entries: map[string]kvEntry{}, wake: make(chan struct{}), barriers: map[string]*barrier{}}
}

func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > maxKeyBytes:
		return fmt.Errorf("%s is %d bytes, more than %d", what, len(s), maxKeyBytes)
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

// Set stores value under scope/key and returns the store's new version.
func (kv *KV) Set(scope, key string, value []byte) (uint64, error) {
	if err := checkName("scope", scope); err != nil {
		return 0, err
	}
	if err := checkName("key", key); err != nil {
		return 0, err
	}
	if len(value) > maxValueBytes {
		return 0, fmt.Errorf("value of %q is %d bytes, more than %d", key, len(value), maxValueBytes)
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	k := scope + "\x00" + key
	old, exists := kv.entries[k]
	if !exists && len(kv.entries) >= maxKVKeys {
		return 0, fmt.Errorf("store holds %d keys, its limit", maxKVKeys)
	}
	if kv.bytes-len(old.value)+len(value) > maxKVTotalBytes {
		return 0, fmt.Errorf("store holds %d bytes of values, its limit", maxKVTotalBytes)
	}
	kv.version++
	kv.bytes += len(value) - len(old.value)
	kv.entries[k] = kvEntry{value: append([]byte(nil), value...), version: kv.version}
	close(kv.wake)
	kv.wake = make(chan struct{})
	return kv.version, nil
}

// Get returns scope/key's value; with wait it blocks until the key is set or
// ctx ends.
func (kv *KV) Get(ctx context.Context, scope, key string, wait bool) ([]byte, uint64, error) {
	if err := checkName("scope", scope); err != nil {
		return nil, 0, err
	}
	if err := checkName("key", key); err != nil {
		return nil, 0, err
	}
	for {
		kv.mu.Lock()
		e, ok := kv.entries[scope+"\x00"+key]
		wake := kv.wake
		kv.mu.Unlock()
		if ok {
			return e.value, e.version, nil
		}
		if !wait {
			return nil, 0, ErrNotFound
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("waiting for key %q: %w", key, ctx.Err())
		}
	}
}

// DeleteScope drops every key and barrier of scope, when its job ends.
func (kv *KV) DeleteScope(scope string) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	prefix := scope + "\x00"
	for k, e := range kv.entries {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			kv.bytes -= len(e.value)
			delete(kv.entries, k)
		}
	}
	for k := range kv.barriers {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			delete(kv.barriers, k)
		}
	}
}

// Barrier returns once count distinct participants have arrived at scope/name,
// or when ctx ends. Arriving twice counts once.
func (kv *KV) Barrier(ctx context.Context, scope, name, participant string, count int) error {
	if err := checkName("scope", scope); err != nil {
		return err
	}
	if err := checkName("barrier name", name); err != nil {
		return err
	}
	if err := checkName("participant", participant); err != nil {
		return err
	}
	if count < 1 || count > maxBarrierCount {
		return fmt.Errorf("barrier %q: count %d is outside 1..%d", name, count, maxBarrierCount)
	}
	kv.mu.Lock()
	k := scope + "\x00" + name
	b := kv.barriers[k]
	if b == nil {
		b = &barrier{count: count, arrived: map[string]bool{}, done: make(chan struct{})}
		kv.barriers[k] = b
	}
	if b.count != count {
		kv.mu.Unlock()
		return fmt.Errorf("barrier %q: count %d differs from the %d it was created with", name, count, b.count)
	}
	if !b.arrived[participant] {
		b.arrived[participant] = true
		if len(b.arrived) == b.count {
			close(b.done)
		}
	}
	kv.mu.Unlock()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("barrier %q: %d of %d arrived: %w", name, len(b.arrived), count, ctx.Err())
	}
}
