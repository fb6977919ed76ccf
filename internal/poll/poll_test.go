package poll

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	Until(t, "the third call", func() bool { return calls.Add(1) == 3 })
	if got := calls.Load(); got != 3 {
		t.Fatalf("cond called %d times, want 3", got)
	}
}

func TestForReturnsTheValueThatSatisfiedIt(t *testing.T) {
	n := 0
	got := For(t, "n to reach 4", func() (int, bool) { n++; return n, n == 4 })
	if got != 4 {
		t.Fatalf("For returned %d, want 4", got)
	}
}

func TestWithinFailsNamingWhatAndTheLastValue(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		Within(r, 30*time.Millisecond, "the output to say done", func() (string, bool) { return "working", false })
	}()
	if r.failed == "" {
		t.Fatal("Within did not fail the test")
	}
	for _, want := range []string{"30ms", "the output to say done", `"working"`} {
		if !strings.Contains(r.failed, want) {
			t.Errorf("failure %q does not contain %q", r.failed, want)
		}
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Errorf("failed after %v, before its deadline", waited)
	}
}
