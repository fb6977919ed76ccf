// Package conformance defines what a correct core.Store is, by test. A driver — ours or a third
// party's — proves itself with one call in its tests:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, myHarness{}) }
//
// The suite has deterministic behaviour tests named after the behaviour they check, a
// pgregory.net/rapid state machine that drives random acquire, extend, release, inspect and
// advance-time steps for several holders against a pure model, a concurrent stress test that
// counts simultaneous holders, and a check of calls cut short (ctx ending after 0.2 to 4 ms,
// failed tries given back as the portable layer does) that keeps exclusion and fences and frees
// every key within FreeBound. Its own tests run it against deliberately broken stores and check
// that each one fails.
//
// What a driver implements is core.Store (four operations, each atomic per key) and, so that its
// waiters are woken rather than polling, core.Notifier; the suite fails a Store without
// notifications unless told WithoutNotifier. core.FenceRaiser is checked when present (a Store
// needs it only to be a Redlock node). A Store that wraps another forwards each capability it
// keeps: the package's wrapper example (a Store that puts every key under a prefix) is a whole
// driver in sixty lines, hooked up with one Run call.
//
// The suite's length is the caller's: it reads no environment variable. By default it runs its
// stress test and its check of calls cut short at a length that keeps the whole suite within
// seconds on a memory store (less under -short); WithSoak(true) runs them longer, for a CI job
// with time to spare. Leasehold's own tests pass WithSoak(true) under LEASEHOLD_SOAK=1.
package conformance

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Harness connects the suite to a backend.
type Harness interface {
	// NewStore returns a Store on the harness's backend. Every Store one harness returns must
	// reach the same backend state, as two processes sharing one server do; a backend that lives
	// in its Store (like the memory store) returns the same Store each time. The harness closes
	// what it opens, for example with t.Cleanup. The suite uses fresh random keys in every test,
	// so the backend need not be emptied between tests. The suite runs its tests at once, so
	// NewStore is called from several goroutines at a time.
	NewStore(t *testing.T) core.Store

	// Advance moves the backend's clock forward by d and reports true, or reports false if the
	// backend runs on real time only. The suite probes it with Advance(0), and moves the clock
	// only from a test that runs alone. On real time the suite waits where a test needs time to
	// pass (about two seconds in all, the tests that wait running at once) and the state
	// machine uses TTLs long enough that nothing expires.
	Advance(d time.Duration) bool
}
