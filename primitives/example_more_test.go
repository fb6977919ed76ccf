package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
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
	fmt.Println("writer while two read:", errors.Is(err, primitives.ErrNotAcquired))

	r1.Release(ctx)
	r2.Release(ctx)
	w, _ := rw.Acquire(ctx)
	_, err = rw.TryAcquireRead(ctx)
	fmt.Println("reader while one writes:", errors.Is(err, primitives.ErrNotAcquired))
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

// A rolling deploy raises a pool's limit from 2 to 5. While processes of the old release hold
// the key under limit 2, a new process asking for 5 is refused with ErrLimitMismatch; it runs
// under the key's limit until the key is free, when 5 becomes the key's limit.
func ExampleSemaphore_rollingLimitChange() {
	ctx := context.Background()
	store := memory.New()
	old, _ := primitives.NewSemaphore(store, "gpu-pool", 2)
	held, _ := old.Acquire(ctx, 1) // a process of the old release

	acquire := func(limit int) (primitives.Lease, error) {
		sem, err := primitives.NewSemaphore(store, "gpu-pool", limit)
		if err != nil {
			return nil, err
		}
		lease, err := sem.Acquire(ctx, 1)
		var lm *primitives.LimitMismatchError
		if errors.As(err, &lm) {
			fmt.Printf("key held under limit %d; using it for now\n", lm.Held)
			sem, _ = primitives.NewSemaphore(store, "gpu-pool", lm.Held)
			return sem.Acquire(ctx, 1)
		}
		return lease, err
	}
	l, _ := acquire(5)
	l.Release(ctx)
	held.Release(ctx) // the last old process is gone: the key is free

	l, _ = acquire(5)
	st, _ := old.Inspect(ctx)
	fmt.Println("limit now:", st.KeyLimit)
	l.Release(ctx)
	// Output:
	// key held under limit 2; using it for now
	// limit now: 5
}

func ExampleNewMultiLock() {
	ctx := context.Background()
	store := memory.New()
	// Two transfers name the same accounts in opposite orders: a MultiLock takes its keys in
	// sorted order, so neither can hold one account while waiting for the other's.
	ab, _ := primitives.NewMultiLock(store, []string{"account:a", "account:b"})
	ba, _ := primitives.NewMultiLock(store, []string{"account:b", "account:a"})

	both, err := ab.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	_, err = ba.TryAcquire(ctx)
	fmt.Println("the other transfer while one holds both:", errors.Is(err, primitives.ErrNotAcquired))
	for _, l := range both.Leases() {
		fmt.Println("holding", l.Key())
	}
	both.Release(ctx)

	both, _ = ba.TryAcquire(ctx)
	fmt.Println("the other transfer after the release:", both.Err() == nil)
	both.Release(ctx)
	// Output:
	// the other transfer while one holds both: true
	// holding account:a
	// holding account:b
	// the other transfer after the release: true
}

func ExampleMultiLock_Do() {
	ctx := context.Background()
	store := memory.New()
	transfer, _ := primitives.NewMultiLock(store, []string{"account:b", "account:a"})
	err := transfer.Do(ctx, func(ctx context.Context, accounts *primitives.MultiLease) error {
		// ctx is canceled, with a cause wrapping primitives.ErrLost that names the key, if any
		// account's lease is lost meanwhile; each lease's fence guards the write to its account.
		for _, l := range accounts.Leases() {
			fmt.Println("writing", l.Key(), "fenced:", l.Fence() > 0)
		}
		return nil
	})
	fmt.Println("transfer:", err)
	st, _ := store.Inspect(ctx, "account:a")
	fmt.Println("account:a held after Do:", len(st.Leases) > 0)
	// Output:
	// writing account:b fenced: true
	// writing account:a fenced: true
	// transfer: <nil>
	// account:a held after Do: false
}

func ExampleLeaseContext_multiLease() {
	ctx := context.Background()
	both, _ := primitives.NewMultiLock(memory.New(), []string{"shard:1", "shard:2"})
	leases, _ := both.Acquire(ctx)
	work, cancel := primitives.LeaseContext(ctx, leases) // ends when any shard's lease does
	defer cancel()

	leases.Leases()[0].Release(ctx) // releasing one member releases the whole
	<-work.Done()
	fmt.Println(context.Cause(work))
	// Output: context canceled
}
