// Package testwait is the tests' one way to wait for a condition: polled
// until it holds, failing the test once its deadline passes.
package testwait

import (
	"testing"
	"time"
)

// every is how often a condition is asked.
const every = 10 * time.Millisecond

// Until polls cond until it holds, or fails t once d has passed, saying
// what it waited for.
func Until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilShowing(t, d, what, cond, nil)
}

// UntilShowing is Until, and a failure shows state(): what the test saw
// instead, such as a process's output so far.
func UntilShowing(t testing.TB, d time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			if state != nil {
				t.Fatalf("timed out after %s waiting for %s; state:\n%s", d, what, state())
			}
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(every)
	}
}
