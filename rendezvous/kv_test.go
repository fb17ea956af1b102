package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestKVSetGet(t *testing.T) {
	kv := NewKV()
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
		{"long key", "job", strings.Repeat("k", maxKeyBytes+1), nil, "more than"},
		{"bad utf8", "job", "\xff", nil, "UTF-8"},
		{"nul in scope", "a\x00b", "k", nil, "NUL"},
		{"big value", "job", "big", make([]byte, maxValueBytes+1), "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kv.Set(tt.scope, tt.key, tt.value)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := kv.Get(ctx, tt.scope, tt.key, false)
			if err != nil || string(got) != string(tt.value) {
				t.Fatalf("get = %q, %v", got, err)
			}
			if _, _, err := kv.Get(ctx, "other", tt.key, false); !errors.Is(err, ErrNotFound) {
				t.Fatalf("another scope sees the key: %v", err)
			}
		})
	}
}

func TestKVWaitingGet(t *testing.T) {
	kv := NewKV()
	done := make(chan string)
	go func() {
		v, _, err := kv.Get(context.Background(), "s", "late", true)
		if err != nil {
			done <- err.Error()
			return
		}
		done <- string(v)
	}()
	time.Sleep(10 * time.Millisecond)
	kv.Set("s", "other", []byte("x"))
	kv.Set("s", "late", []byte("here"))
	if got := <-done; got != "here" {
		t.Fatalf("waiting get = %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := kv.Get(ctx, "s", "never", true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get of a missing key past its deadline: %v", err)
	}
}

func TestKVDeleteScope(t *testing.T) {
	kv := NewKV()
	kv.Set("a", "k", []byte("1"))
	kv.Set("ab", "k", []byte("2"))
	kv.DeleteScope("a")
	if _, _, err := kv.Get(context.Background(), "a", "k", false); !errors.Is(err, ErrNotFound) {
		t.Fatal("key survived DeleteScope")
	}
	if _, _, err := kv.Get(context.Background(), "ab", "k", false); err != nil {
		t.Fatal("DeleteScope removed another scope's key")
	}
	if kv.bytes != 1 {
		t.Fatalf("bytes = %d after delete, want 1", kv.bytes)
	}
}

func TestBarrier(t *testing.T) {
	kv := NewKV()
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			errs <- kv.Barrier(ctx, "job", "b", fmt.Sprint(i), n)
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
	kv.Barrier(ctx, "job", "short", "p", 2)
	if err := kv.Barrier(ctx, "job", "short", "p", 2); err == nil {
		t.Fatal("one participant arriving twice released a barrier of two")
	}
	if err := kv.Barrier(context.Background(), "job", "short", "q", 3); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("mismatched count: %v", err)
	}
	if err := kv.Barrier(context.Background(), "job", "zero", "q", 0); err == nil {
		t.Fatal("count 0 accepted")
	}
}
