package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The in-process store under the primitives: for a program of one process, the demo, and unit
// tests (run them in a testing/synctest bubble to put leases on fake time: docs/testing.md).
func ExampleNew() {
	ctx := context.Background()
	store := memory.New()
	mu, _ := primitives.NewMutex(store, "report:daily")
	lease, _ := mu.Acquire(ctx)
	defer lease.Release(ctx)

	other, _ := primitives.NewMutex(store, "report:daily") // another handle on the same key
	_, err := other.TryAcquire(ctx)
	fmt.Println(errors.Is(err, primitives.ErrNotAcquired))
	// Output: true
}

// The store's own clock, moved by hand: what a driver's conformance harness does (see package
// conformance). It moves the store's time only, not the leases' timers, so code that holds
// leases is tested in a testing/synctest bubble instead (docs/testing.md).
func ExampleWithClock() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	ctx := context.Background()
	store.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})

	clock.Advance(time.Minute) // the lease expires by the store's clock, with no action of its holder
	res, _ := store.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
	fmt.Println(res.Granted)
	// Output: true
}
