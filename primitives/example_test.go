package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/primitives"
)

func ExampleNewMutex() {
	ctx := context.Background()
	store := memory.New()
	mu, err := primitives.NewMutex(store, "report:daily", primitives.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	lease, err := mu.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", lease.Key(), "with", lease.Permits(), "permit")
	if err := lease.Release(ctx); err != nil {
		fmt.Println("the lease was lost before release:", err)
	}
	// Output: holding report:daily with 1 permit
}

func ExampleMutex_TryAcquire() {
	ctx := context.Background()
	store := memory.New()
	mu, _ := primitives.NewMutex(store, "report:daily")
	first, _ := mu.Acquire(ctx)
	defer first.Release(ctx)

	_, err := mu.TryAcquire(ctx)
	fmt.Println(errors.Is(err, primitives.ErrNotAcquired))
	// Output: true
}

func ExampleNewSemaphore() {
	ctx := context.Background()
	store := memory.New()
	gpus, err := primitives.NewSemaphore(store, "gpu-pool", 4)
	if err != nil {
		panic(err)
	}
	training, _ := gpus.Acquire(ctx, 3) // weighted: three permits as one lease
	defer training.Release(ctx)

	_, err = gpus.TryAcquire(ctx, 2)
	fmt.Println("two more:", errors.Is(err, primitives.ErrNotAcquired))
	inference, _ := gpus.TryAcquire(ctx, 1)
	defer inference.Release(ctx)
	fmt.Println("one more:", inference.Permits())
	// Output:
	// two more: true
	// one more: 1
}

func ExampleSemaphore_Adopt() {
	ctx := context.Background()
	store := memory.New()
	sem, _ := primitives.NewSemaphore(store, "import", 2)
	lease, _ := sem.Acquire(ctx, 2)
	holder := lease.Holder() // hand this id to the process taking over
	lease.StopRefresh()

	taken, err := sem.Adopt(ctx, holder)
	if err != nil {
		panic(err)
	}
	fmt.Println(taken.Permits(), taken.Fence() == lease.Fence())
	taken.Release(ctx)
	// Output: 2 true
}

func ExampleWithOnLost() {
	ctx := context.Background()
	store := memory.New()
	lost := make(chan error, 1)
	mu, _ := primitives.NewMutex(store, "leader",
		primitives.WithTTL(50*time.Millisecond), primitives.WithoutRefresh(),
		primitives.WithOnLost(func(l primitives.Lease, err error) { lost <- err }))
	lease, _ := mu.Acquire(ctx)
	<-lease.Done() // no refresh: the lease ends at its deadline
	fmt.Println(errors.Is(<-lost, primitives.ErrLost), errors.Is(lease.Release(ctx), primitives.ErrLost))
	// Output: true true
}

func ExampleMutex_Inspect() {
	ctx := context.Background()
	store := memory.New()
	sem, _ := primitives.NewSemaphore(store, "gpu-pool", 4)
	lease, _ := sem.Acquire(ctx, 3)
	defer lease.Release(ctx)

	mu, _ := primitives.NewMutex(store, "gpu-pool") // any handle on the key can look
	st, _ := mu.Inspect(ctx)
	fmt.Println(len(st.Leases), "holder with", st.Leases[0].Permits, "permits;", st.InUse, "in use")
	// Output: 1 holder with 3 permits; 3 in use
}

func ExampleSemaphore_Inspect() {
	ctx := context.Background()
	sem, _ := primitives.NewSemaphore(memory.New(), "gpu-pool", 4)
	lease, _ := sem.Acquire(ctx, 1)
	defer lease.Release(ctx)

	st, _ := sem.Inspect(ctx)
	fmt.Println(st.InUse, "in use,", st.Free, "free of", st.Limit)
	// Output: 1 in use, 3 free of 4
}

func Example_leaseExtend() {
	ctx := context.Background()
	mu, _ := primitives.NewMutex(memory.New(), "migration", primitives.WithTTL(time.Minute))
	lease, _ := mu.Acquire(ctx)
	defer lease.Release(ctx)

	// A long step ahead: renew now for an hour rather than rely on the background refresh.
	deadline, err := lease.Extend(ctx, time.Hour)
	fmt.Println(err == nil, time.Until(deadline) > 59*time.Minute)
	// Output: true true
}

func Example_leaseHeld() {
	ctx := context.Background()
	mu, _ := primitives.NewMutex(memory.New(), "payout")
	lease, _ := mu.Acquire(ctx)
	defer lease.Release(ctx)

	// Before an irreversible side effect, ask the store rather than trust the local view.
	if held, err := lease.Held(ctx); err == nil && held {
		fmt.Println("still held: pay out with fence", lease.Fence() > 0)
	}
	// Output: still held: pay out with fence true
}

func ExampleSemaphore_Do() {
	ctx := context.Background()
	gpus, _ := primitives.NewSemaphore(memory.New(), "gpu-pool", 4)
	err := gpus.Do(ctx, 3, func(ctx context.Context, lease primitives.Lease) error {
		// ctx is canceled, with a cause wrapping primitives.ErrLost, if the lease is lost meanwhile.
		fmt.Println("training on", lease.Permits(), "GPUs")
		return nil
	})
	fmt.Println(err)
	// Output:
	// training on 3 GPUs
	// <nil>
}

func ExampleLeaseContext() {
	ctx := context.Background()
	mu, _ := primitives.NewMutex(memory.New(), "leader")
	lease, _ := mu.Acquire(ctx)
	work, cancel := primitives.LeaseContext(ctx, lease)
	defer cancel()

	lease.Release(ctx)
	<-work.Done()
	fmt.Println(context.Cause(work))
	// Output: context canceled
}

func ExampleWithLogger() {
	// Log every lease event; here to stdout without times, so the output is stable.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "holder" || a.Key == "fence" || a.Key == "wait" || a.Key == "held" {
				return slog.Attr{}
			}
			return a
		},
	}))
	ctx := context.Background()
	mu, _ := primitives.NewMutex(memory.New(), "report:daily", primitives.WithLogger(logger))
	lease, _ := mu.Acquire(ctx)
	lease.Release(ctx)
	// Output:
	// level=DEBUG msg="leasehold: lease acquired" key=report:daily permits=1
	// level=DEBUG msg="leasehold: lease released" key=report:daily permits=1
}
