// Package kv is the job-scoped key-value store that workers share: Get,
// Set, Add, CompareAndSwap, Delete, Wait and barriers, in spaces named by
// job so that no job sees another's keys. The store's gRPC KV service sits
// on it, and so will the PMI and TCPStore servers. Memory is the in-memory
// implementation.
package kv

import (
	"context"
	"errors"
)

// ErrNotFound is a key that is not set.
var ErrNotFound = errors.New("not found")

// Store holds every job's space.
type Store interface {
	// Space is scope's keys; it exists from its first use until Drop.
	Space(scope string) Space
	// Drop forgets scope's keys and barriers, when its job ends; waiters
	// get an error.
	Drop(scope string)
}

// Space is one job's keys, queues and barriers. Keys and barrier names are
// non-empty UTF-8 without NUL (keys any bytes under Limits.BinaryKeys),
// bounded in length, as are values.
type Space interface {
	// Set stores value and returns the store's new version.
	Set(key string, value []byte) (uint64, error)
	// Get returns key's value and version; with wait it blocks until the
	// key is set or ctx ends, else a missing key is ErrNotFound.
	Get(ctx context.Context, key string, wait bool) ([]byte, uint64, error)
	// Add adds delta to key's value read as a decimal integer (0 when
	// missing) and returns the sum, stored as decimal text.
	Add(key string, delta int64) (int64, error)
	// CompareAndSwap stores next when key's value is old, or when key is
	// missing and old is empty; it returns the value key holds afterwards,
	// and whether key was there before.
	CompareAndSwap(key string, old, next []byte) ([]byte, bool, error)
	// Append adds value to the end of key's value, an empty one if missing.
	Append(key string, value []byte) error
	// Delete removes key and reports whether it was there.
	Delete(key string) (bool, error)
	// Has says whether every key is set or has a non-empty queue.
	Has(keys ...string) (bool, error)
	// Wait blocks until every key is set or has a non-empty queue, or ctx
	// ends.
	Wait(ctx context.Context, keys ...string) error
	// Push adds value to the end of key's queue; queues are apart from
	// values, but a non-empty one counts as its key being there.
	Push(key string, value []byte) error
	// Pop takes the first item of key's queue, and says how many it held.
	Pop(key string) ([]byte, int, error)
	// QueueLen is how many items key's queue holds.
	QueueLen(key string) (int, error)
	// Barrier returns once count distinct participants arrived at name, or
	// ctx ends. Arriving twice counts once.
	Barrier(ctx context.Context, name, participant string, count int) error
	// Len is how many keys are set.
	Len() int
}
