package kv

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestQueue(t *testing.T) {
	m := NewMemory()
	sp := m.Space("job")
	steps := []struct {
		name string
		do   func() (string, error)
		want string
	}{
		{"pop empty", func() (string, error) { v, n, err := sp.Pop("q"); return string(v) + itoa(int64(n)), err }, "0"},
		{"len empty", func() (string, error) { n, err := sp.QueueLen("q"); return itoa(int64(n)), err }, "0"},
		{"empty queue is not there", func() (string, error) { ok, err := sp.Has("q"); return boolS(ok), err }, "false"},
		{"push a", func() (string, error) { return "", sp.Push("q", []byte("a")) }, ""},
		{"push b", func() (string, error) { return "", sp.Push("q", []byte("b")) }, ""},
		{"queue is there", func() (string, error) { ok, err := sp.Has("q"); return boolS(ok), err }, "true"},
		{"but is no value", func() (string, error) { _, _, err := sp.Get(context.Background(), "q", false); return err.Error(), nil }, "not found"},
		{"len", func() (string, error) { n, err := sp.QueueLen("q"); return itoa(int64(n)), err }, "2"},
		{"pop first", func() (string, error) { v, n, err := sp.Pop("q"); return string(v) + itoa(int64(n)), err }, "a2"},
		{"pop second", func() (string, error) { v, n, err := sp.Pop("q"); return string(v) + itoa(int64(n)), err }, "b1"},
		{"gone", func() (string, error) { ok, err := sp.Has("q"); return boolS(ok), err }, "false"},
		{"over the value limit", func() (string, error) {
			err := sp.Push("q", make([]byte, MaxValueBytes+1))
			return boolS(err != nil && strings.Contains(err.Error(), "more than")), nil
		}, "true"},
	}
	for _, st := range steps {
		got, err := st.do()
		if err != nil || got != st.want {
			t.Fatalf("%s: %q, %v; want %q", st.name, got, err, st.want)
		}
	}
	if m.keys != 0 || m.bytes != 0 {
		t.Fatalf("accounting after the queue emptied: %d keys, %d bytes", m.keys, m.bytes)
	}
	done := make(chan error, 1)
	go func() { done <- sp.Wait(context.Background(), "w") }()
	waitFor(t, m, "job", "w")
	sp.Push("w", []byte("x"))
	if err := <-done; err != nil {
		t.Fatalf("a push did not end a wait: %v", err)
	}
	m.Drop("job")
	if m.keys != 0 || m.bytes != 0 {
		t.Fatalf("accounting after drop: %d keys, %d bytes", m.keys, m.bytes)
	}
}

func TestLimits(t *testing.T) {
	l := Limits{KeyBytes: 8, ValueBytes: 4, Keys: 2, TotalBytes: 8, BinaryKeys: true}
	sp := NewMemoryWith(l).Space("job")
	steps := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"binary key", set(sp, "\x00\xff", "ab"), ""},
		{"empty key", set(sp, "", "ab"), ""},
		{"third key", set(sp, "k3", "a"), "keys, its limit"},
		{"long key", set(sp, "123456789", "a"), "more than 8"},
		{"big value", set(sp, "", "abcde"), "more than 4"},
		{"total bytes", set(sp, "", "abcd"), ""},
		{"over total", set(sp, "\x00\xff", "abc"), "bytes of keys and values"},
	}
	for _, st := range steps {
		if (st.err == nil) != (st.wantErr == "") || (st.err != nil && !strings.Contains(st.err.Error(), st.wantErr)) {
			t.Errorf("%s: %v, want %q", st.name, st.err, st.wantErr)
		}
	}
}

func set(sp Space, k, v string) error { _, err := sp.Set(k, []byte(v)); return err }

// TestManyWaiters has thousands wait for one key while another changes
// thousands of times, as ranks joining a job do: each waiter wakes once.
func TestManyWaiters(t *testing.T) {
	sp := NewMemory().Space("job")
	const n = 5000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, err := sp.Add("count", 1); err != nil {
				errs <- err
			} else if got == n {
				sp.Set("last", []byte("1"))
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := sp.Wait(ctx, "last"); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if w := len(sp.(*space).waiters); w != 0 {
		t.Fatalf("%d waiter entries left", w)
	}
	// A waiter that gives up leaves nothing behind.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := sp.Wait(ctx, "never"); err == nil {
		t.Fatal("Wait for a missing key returned nil")
	}
	if w := len(sp.(*space).waiters); w != 0 {
		t.Fatalf("%d waiter entries left after a timeout", w)
	}
}
