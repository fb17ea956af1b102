package kv_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/musterhq/muster/kv"
)

// Memories sharing a budget hold no more than it together, each within its
// own bound too, and what one drops the others may use.
func TestBudgetBoundsMemoriesTogether(t *testing.T) {
	b := kv.NewBudget(100, "the test's stores")
	limits := kv.Limits{KeyBytes: 16, ValueBytes: 64, Keys: 10, TotalBytes: 80, Shared: b}
	one, two := kv.NewMemoryWith(limits), kv.NewMemoryWith(limits)
	value := strings.Repeat("x", 59) // 60 bytes with its key
	if _, err := one.Space("a").Set("k", []byte(value)); err != nil {
		t.Fatal(err)
	}
	_, err := two.Space("a").Set("k", []byte(value))
	if !errors.Is(err, kv.ErrFull) || !strings.Contains(err.Error(), "the test's stores hold 100 bytes") {
		t.Fatalf("past the shared budget: %v", err)
	}
	if err := two.Space("a").Push("q", []byte("small")); err != nil {
		t.Fatalf("within it: %v", err)
	}
	if _, err := one.Space("a").Set("k2", []byte(strings.Repeat("y", 30))); !errors.Is(err, kv.ErrFull) {
		t.Fatalf("past one store's own bound: %v", err)
	}
	one.Drop("a")
	if got := b.Used(); got != 6 {
		t.Fatalf("after a drop the budget holds %d bytes, want 6", got)
	}
	if _, err := two.Space("a").Set("k", []byte(value)); err != nil {
		t.Fatalf("after the other dropped its space: %v", err)
	}
}
