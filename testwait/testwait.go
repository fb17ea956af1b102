// Package testwait is the tests' one way to wait for a condition: polled
// until it holds, failing the test once its deadline passes.
package testwait

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// A condition is asked again after first, then less often, up to every
// most: a wait of seconds (a condition that runs a command, as many do)
// costs a loaded machine little, and a short one stays short.
const (
	first = 10 * time.Millisecond
	most  = 100 * time.Millisecond
)

// pause sleeps before the next ask and returns the pause after it.
func pause(d time.Duration) time.Duration {
	time.Sleep(d)
	return min(d*3/2, most)
}

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
	for next := first; !cond(); {
		if time.Now().After(deadline) {
			if state != nil {
				t.Fatalf("timed out after %s waiting for %s; state:\n%s", d, what, state())
			}
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		next = pause(next)
	}
}

// GoroutinesGone waits until no goroutine runs code of the packages whose
// import paths start with prefix (the test's own package aside), or fails
// t once d has passed, naming one that is left.
func GoroutinesGone(t testing.TB, d time.Duration, prefix string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for next := first; ; {
		left := goroutineOf(prefix)
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for the goroutines of %s to end; one left:\n%s", d, prefix, left)
		}
		next = pause(next)
	}
}

// goroutineOf is the stack of a goroutine other than this one and the
// tests' own that runs code under prefix, outside a _test package, or "".
func goroutineOf(prefix string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	// The first stack is this goroutine's.
	stacks := strings.Split(string(buf), "\n\n")
	for _, st := range stacks[1:] {
		if strings.Contains(st, "\ntesting.tRunner(") {
			continue
		}
		for _, line := range strings.Split(st, "\n") {
			if strings.HasPrefix(line, prefix) && !strings.Contains(line, "_test.") && !strings.Contains(line, "/testwait.") {
				return st
			}
		}
	}
	return ""
}
