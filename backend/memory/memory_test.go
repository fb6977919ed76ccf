package memory_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness serves one memory Store on a manual clock: every "process" shares it.
type harness struct {
	clock *core.ManualClock
	store *memory.Store
}

func newHarness() *harness {
	c := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &harness{clock: c, store: memory.New(memory.WithClock(c))}
}

func (h *harness) NewStore(*testing.T) core.Store { return h.store }

func (h *harness) Advance(d time.Duration) bool {
	h.clock.Advance(d)
	return true
}

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, newHarness(), conformance.WithSoak(testenv.Soak()))
}

// realTime serves a memory Store on the system clock, as a harness of a real server would.
type realTime struct{ store *memory.Store }

func (h realTime) NewStore(*testing.T) core.Store { return h.store }
func (realTime) Advance(time.Duration) bool       { return false }

func TestConformanceRealTime(t *testing.T) {
	testenv.SkipShort(t, "waits out real TTLs for seconds: TestConformance runs the suite on the manual clock")
	t.Parallel() // mostly waits out real TTLs
	conformance.Run(t, realTime{memory.New()}, conformance.WithSoak(testenv.Soak()))
}
