package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Two bounds end a wait, and their errors differ: the acquire timeout (WithAcquireTimeout, 10s by
// default) wraps ErrNotAcquired; the end of the caller's ctx wraps the ctx's error instead.
func ExampleMutex_Acquire_deadlines() {
	store := memory.New()
	holder, _ := primitives.NewMutex(store, "report")
	held, _ := holder.Acquire(context.Background())
	defer held.Release(context.Background())

	mu, _ := primitives.NewMutex(store, "report", primitives.WithAcquireTimeout(20*time.Millisecond))
	_, err := mu.Acquire(context.Background())
	fmt.Println("acquire timeout:", errors.Is(err, primitives.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))

	mu, _ = primitives.NewMutex(store, "report") // the default acquire timeout: 10s
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = mu.Acquire(ctx)
	fmt.Println("ctx deadline:", errors.Is(err, primitives.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// acquire timeout: true false
	// ctx deadline: false true
}

// All keys or none, as redislock's ObtainMulti: one held key refuses the whole, and nothing is
// left held.
func ExampleMultiLock_TryAcquire() {
	ctx := context.Background()
	store := memory.New()
	other, _ := primitives.NewMutex(store, "order:2")
	held, _ := other.Acquire(ctx)

	ml, _ := primitives.NewMultiLock(store, []string{"order:1", "order:2"}, primitives.WithTTL(30*time.Second))
	_, err := ml.TryAcquire(ctx)
	fmt.Println("one key held:", errors.Is(err, primitives.ErrNotAcquired))
	st, _ := store.Inspect(ctx, "order:1")
	fmt.Println("order:1 left held:", len(st.Leases) > 0)

	held.Release(ctx)
	all, err := ml.TryAcquire(ctx)
	fmt.Println("both free:", err == nil, len(all.Leases()), "leases")
	all.Release(ctx)
	// Output:
	// one key held: true
	// order:1 left held: false
	// both free: true 2 leases
}

// A lease the store no longer holds (its data lost in a restart, here released behind its back)
// is never revived by a refresh, as redsync's WithSetNXOnExtend would: it is lost, and the
// program acquires again, under the same holder id if others know it by that id. The new lease
// has a higher fence, so a resource can tell the work before the loss from the work after.
func ExampleWithHolder_acquireAgainAfterALoss() {
	ctx := context.Background()
	store := memory.New()
	mu, _ := primitives.NewMutex(store, "report", primitives.WithHolder("worker-7"))
	lease, _ := mu.Acquire(ctx)

	store.Release(ctx, core.ReleaseRequest{Key: "report", Holder: "worker-7"}) // the store forgets it
	held, _ := lease.Held(ctx)                                                 // or a refresh finds it gone
	fmt.Println("held:", held, "lost:", errors.Is(lease.Err(), primitives.ErrLost))

	again, err := mu.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("same holder:", again.Holder() == lease.Holder(), "higher fence:", again.Fence() > lease.Fence())
	again.Release(ctx)
	// Output:
	// held: false lost: true
	// same holder: true higher fence: true
}
