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

func ExampleWithValue() {
	ctx := context.Background()
	store := memory.New()
	mu, _ := primitives.NewMutex(store, "nightly-backup", primitives.WithValue("host-a pid 4242"))
	lease, _ := mu.Acquire(ctx)
	defer lease.Release(ctx)

	st, _ := mu.Inspect(ctx)
	fmt.Printf("held by %q\n", st.Leases[0].Value)
	// Output: held by "host-a pid 4242"
}

func ExampleNewRWMutex() {
	ctx := context.Background()
	store := memory.New()
	rw, err := primitives.NewRWMutex(store, "config")
	if err != nil {
		panic(err)
	}
	r1, _ := rw.AcquireRead(ctx)
	r2, _ := rw.AcquireRead(ctx) // readers share the key
	_, err = rw.TryAcquire(ctx)
	fmt.Println("writer while two read:", errors.Is(err, core.ErrNotAcquired))

	r1.Release(ctx)
	r2.Release(ctx)
	w, _ := rw.Acquire(ctx)
	_, err = rw.TryAcquireRead(ctx)
	fmt.Println("reader while one writes:", errors.Is(err, core.ErrNotAcquired))
	w.Release(ctx)
	// Output:
	// writer while two read: true
	// reader while one writes: true
}

func ExampleNewElection() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memory.New()
	el, err := primitives.NewElection(store, "scheduler", primitives.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	changes := el.Observe(ctx)
	fmt.Printf("leader: %q\n", (<-changes).Value) // no leader yet

	a, _ := el.Campaign(ctx, "host-a:8080")
	fmt.Printf("leader: %q\n", (<-changes).Value)

	a.Release(ctx) // resign
	fmt.Printf("leader: %q\n", (<-changes).Value)

	b, _ := el.Campaign(ctx, "host-b:8080")
	ld := <-changes
	fmt.Printf("leader: %q, term after host-a's: %v\n", ld.Value, ld.Fence > a.Fence())
	b.Release(ctx)
	// Output:
	// leader: ""
	// leader: "host-a:8080"
	// leader: ""
	// leader: "host-b:8080", term after host-a's: true
}
