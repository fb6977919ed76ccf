package etcd_test

import (
	"context"
	"errors"
	"log"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/primitives"
)

// What a program written against etcd's concurrency package (a session, its Mutex, its Election)
// becomes, as docs/migrating.md walks through it. It needs an etcd server on 127.0.0.1:2379, so it
// has no Output and is compiled, not run, by go test.
func ExampleNew_fromConcurrency() {
	ctx := context.Background()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // deferred first, so it runs last: after the Store's Close

	store, err := etcd.New(client) // no session to make: each lease has an etcd lease of its own TTL
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // revokes the Store's session and spare etcd leases, while the client is open

	// etcd: concurrency.NewMutex(session, "report"), Lock(ctx), which waits until ctx ends.
	mu, err := primitives.NewMutex(store, "report", primitives.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := mu.Acquire(ctx) // gives up after the acquire timeout, 10s by default
	if errors.Is(err, primitives.ErrNotAcquired) {
		log.Fatal("busy for 10s")
	}
	if err != nil {
		log.Fatal(err)
	}
	// etcd: a Txn guarded by mu.IsOwner(); here a fenced write, refused once a later holder wrote.
	if _, err := store.Fenced(ctx, "report", lease.Fence(), clientv3.OpPut("report/latest", "done")); err != nil {
		log.Print(err) // wraps primitives.ErrLost when the lease was lost and given on
	}
	if err := lease.Release(ctx); err != nil { // etcd: Unlock(ctx)
		log.Print(err) // wraps primitives.ErrLost when the work ran unprotected
	}

	// As etcd's Lock: wait until ctx ends, with no acquire timeout of its own.
	patient, err := primitives.NewMutex(store, "report", primitives.WithAcquireTimeout(math.MaxInt64))
	if err != nil {
		log.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if lease, err := patient.Acquire(wctx); err == nil {
		lease.Release(ctx)
	} else if errors.Is(err, context.DeadlineExceeded) {
		log.Print("busy for a minute") // the ctx's end, not primitives.ErrNotAcquired
	}

	// etcd: concurrency.NewElection(session, "leader"), Campaign(ctx, "host-a"), Resign(ctx).
	el, err := primitives.NewElection(store, "leader") // Campaign waits until it leads or ctx ends
	if err != nil {
		log.Fatal(err)
	}
	term, err := el.Campaign(ctx, "host-a")
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("leading in term %d", term.Fence()) // etcd: Election.Rev()
	term.Release(ctx)                              // etcd: Resign(ctx)
}
