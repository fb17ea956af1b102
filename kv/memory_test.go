package kv

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

func TestSetGetBounds(t *testing.T) {
	m := NewMemory()
	ctx := context.Background()
	tests := []struct {
		name    string
		scope   string
		key     string
		value   []byte
		wantErr string
	}{
		{"plain", "job", "k", []byte("v"), ""},
		{"empty value", "job", "empty", nil, ""},
		{"empty key", "job", "", []byte("v"), "key is empty"},
		{"long key", "job", strings.Repeat("k", MaxKeyBytes+1), nil, "more than"},
		{"bad utf8", "job", "\xff", nil, "UTF-8"},
		{"nul in scope", "a\x00b", "k", nil, "NUL"},
		{"big value", "job", "big", make([]byte, MaxValueBytes+1), "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := m.Space(tt.scope)
			_, err := sp.Set(tt.key, tt.value)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := sp.Get(ctx, tt.key, false)
			if err != nil || string(got) != string(tt.value) {
				t.Fatalf("get = %q, %v", got, err)
			}
			if _, _, err := m.Space("other").Get(ctx, tt.key, false); !errors.Is(err, ErrNotFound) {
				t.Fatalf("another scope sees the key: %v", err)
			}
		})
	}
}

func TestAddCompareAndSwapDelete(t *testing.T) {
	sp := NewMemory().Space("job")
	steps := []struct {
		name string
		do   func() (string, error)
		want string
	}{
		{"add to missing", func() (string, error) { n, err := sp.Add("n", 3); return itoa(n), err }, "3"},
		{"add negative", func() (string, error) { n, err := sp.Add("n", -5); return itoa(n), err }, "-2"},
		{"cas on missing with nil", func() (string, error) { v, _, err := sp.CompareAndSwap("c", nil, []byte("a")); return string(v), err }, "a"},
		{"cas mismatch keeps", func() (string, error) {
			v, _, err := sp.CompareAndSwap("c", []byte("x"), []byte("b"))
			return string(v), err
		}, "a"},
		{"cas match swaps", func() (string, error) {
			v, _, err := sp.CompareAndSwap("c", []byte("a"), []byte("b"))
			return string(v), err
		}, "b"},
		{"cas on missing with non-empty old", func() (string, error) {
			v, had, err := sp.CompareAndSwap("gone", []byte("x"), []byte("b"))
			return string(v) + boolS(had), err
		}, "false"},
		{"append to missing", func() (string, error) { err := sp.Append("ap", []byte("ab")); return "", err }, ""},
		{"append to present", func() (string, error) {
			err := sp.Append("ap", []byte("cd"))
			v, _, _ := sp.Get(context.Background(), "ap", false)
			return string(v), err
		}, "abcd"},
		{"append over the value limit", func() (string, error) {
			err := sp.Append("ap", make([]byte, MaxValueBytes))
			return boolS(err != nil), nil
		}, "true"},
		{"has present", func() (string, error) { ok, err := sp.Has("ap", "n"); return boolS(ok), err }, "true"},
		{"has one missing", func() (string, error) { ok, err := sp.Has("ap", "zz"); return boolS(ok), err }, "false"},
		{"delete appended", func() (string, error) { ok, err := sp.Delete("ap"); return boolS(ok), err }, "true"},
		{"delete present", func() (string, error) { ok, err := sp.Delete("c"); return boolS(ok), err }, "true"},
		{"delete absent", func() (string, error) { ok, err := sp.Delete("c"); return boolS(ok), err }, "false"},
		{"len", func() (string, error) { return itoa(int64(sp.Len())), nil }, "1"},
	}
	for _, st := range steps {
		got, err := st.do()
		if err != nil || got != st.want {
			t.Fatalf("%s: %q, %v; want %q", st.name, got, err, st.want)
		}
	}
	sp.Set("text", []byte("abc"))
	if _, err := sp.Add("text", 1); err == nil {
		t.Fatal("Add on a non-integer succeeded")
	}
	sp.Set("max", []byte("9223372036854775807"))
	if _, err := sp.Add("max", 1); err == nil {
		t.Fatal("Add overflowed silently")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

func boolS(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestWaitAndDrop(t *testing.T) {
	m := NewMemory()
	sp := m.Space("job")
	done := make(chan error, 1)
	go func() { done <- sp.Wait(context.Background(), "a", "b") }()
	sp.Set("a", nil)
	waitFor(t, m, "job", "b")
	select {
	case <-done:
		t.Fatal("Wait returned with a key missing")
	default:
	}
	sp.Set("b", nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A job that ends wakes its waiters with an error, and its keys go.
	go func() { done <- sp.Wait(context.Background(), "never") }()
	waitFor(t, m, "job", "never")
	m.Drop("job")
	if err := <-done; err == nil {
		t.Fatal("a waiter of a dropped job returned nil")
	}
	if _, _, err := m.Space("job").Get(context.Background(), "a", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("keys of a dropped job remain: %v", err)
	}
	if m.keys != 0 || m.bytes != 0 {
		t.Fatalf("accounting after drop: %d keys, %d bytes", m.keys, m.bytes)
	}
}

func TestBarrier(t *testing.T) {
	sp := NewMemory().Space("job")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- sp.Barrier(context.Background(), "b", fmtInt(int64(i)), 8)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := sp.Barrier(ctx, "c", "x", 2); err == nil || !strings.Contains(err.Error(), "1 of 2 arrived") {
		t.Fatalf("lone participant: %v", err)
	}
	if err := sp.Barrier(ctx, "c", "y", 3); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("count mismatch: %v", err)
	}
}

func FuzzSpace(f *testing.F) {
	f.Add("k", []byte("v"), int64(1), []byte("v"))
	f.Fuzz(func(t *testing.T, key string, value []byte, delta int64, old []byte) {
		sp := NewMemory().Space("job")
		sp.Set(key, value)
		sp.Add(key, delta)
		sp.CompareAndSwap(key, old, value)
		sp.Append(key, old)
		sp.Push(key, value)
		sp.Get(context.Background(), key, false)
		sp.Delete(key)
		sp.Pop(key)
		if sp.Len() != 0 {
			t.Fatalf("a key is left after Delete")
		}
		if n, _ := sp.QueueLen(key); n != 0 {
			t.Fatalf("an item is left after Pop")
		}
	})
}

// waitFor waits until a Wait of scope blocks on key.
func waitFor(t *testing.T, m *Memory, scope, key string) {
	t.Helper()
	testwait.Until(t, 10*time.Second, "a Wait blocked on "+key, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		sp := m.spaces[scope]
		return sp != nil && sp.waiters[key] != nil && sp.waiters[key].n > 0
	})
}
