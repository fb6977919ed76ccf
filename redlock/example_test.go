package redlock_test

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

func ExampleNew() {
	// Three independent stores; in production, three Redis servers through goredis or valkey.
	store, err := redlock.New([]primitives.Store{memory.New(), memory.New(), memory.New()})
	if err != nil {
		panic(err)
	}
	mu, _ := primitives.NewMutex(store, "report:daily")
	lease, _ := mu.Acquire(context.Background())
	defer lease.Release(context.Background())
	fmt.Println("a mutex needs", store.Quorum(1), "nodes; a semaphore of 4 needs", store.Quorum(4))
	// Output: a mutex needs 2 nodes; a semaphore of 4 needs 3
}
