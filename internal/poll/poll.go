// Package poll is the one way Leasehold's tests wait for a condition that another goroutine,
// process or server makes true: poll it with a deadline, never sleep a fixed time and hope.
//
// It lives at the module's root so that every package's tests (primitives, the backends, the
// CLI) can import it; it is internal, so it is not part of the API.
package poll

import (
	"fmt"
	"testing"
	"time"
)

// Timeout is how long Until and For wait before they fail the test. It is long because a
// loaded 2-core machine running two suites at once stalls a process for seconds; a condition
// that holds costs only the time it takes.
const Timeout = 20 * time.Second

// Until calls cond until it returns true, first every millisecond and backing off to every
// 20 ms, and fails t with what it waited for if it has not within Timeout. Call it from the
// test's goroutine.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	For(t, what, func() (struct{}, bool) { return struct{}{}, cond() })
}

// For calls f until its second result is true and returns its first. If that has not happened
// within Timeout it fails t, naming what it waited for and the last value f returned. Call it
// from the test's goroutine.
func For[T any](t testing.TB, what string, f func() (T, bool)) T {
	t.Helper()
	return within(t, Timeout, what, f)
}

// Within is For with a deadline of d instead of Timeout, for a wait whose bound is what the
// test checks.
func Within[T any](t testing.TB, d time.Duration, what string, f func() (T, bool)) T {
	t.Helper()
	return within(t, d, what, f)
}

func within[T any](t testing.TB, d time.Duration, what string, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for {
		v, ok := f()
		if ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, still not %s (last: %s)", d, what, describe(v))
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

func describe(v any) string {
	switch v := v.(type) {
	case struct{}:
		return "false"
	case string:
		return fmt.Sprintf("%q", v)
	default:
		return fmt.Sprintf("%v", v)
	}
}
