package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

func ExampleNew() {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock)) // tests move time by hand
	ctx := context.Background()
	store.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})

	clock.Advance(time.Minute) // the lease expires by the store's clock, with no action of its holder
	res, _ := store.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
	fmt.Println(res.Granted)
	// Output: true
}
