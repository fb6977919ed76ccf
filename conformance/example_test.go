package conformance_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
)

// myHarness connects the suite to a driver: here the memory store on a clock the suite moves.
// A Redis driver's harness returns a new client and Store per call, all on one server, and
// reports false from Advance (or moves miniredis's clock).
type myHarness struct {
	clock *core.ManualClock
	store *memory.Store
}

func (h myHarness) NewStore(*testing.T) core.Store { return h.store }

func (h myHarness) Advance(d time.Duration) bool {
	h.clock.Advance(d)
	return true
}

// A third-party driver proves itself with one call in its tests.
func ExampleRun() {
	clock := core.NewManualClock(time.Now())
	h := myHarness{clock: clock, store: memory.New(memory.WithClock(clock))}

	// In the driver's _test.go file:
	_ = func(t *testing.T) { conformance.Run(t, h) }
}
