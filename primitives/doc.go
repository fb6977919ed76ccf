// Package primitives is what a program using Leasehold imports, beside one backend: the
// distributed Mutex, weighted Semaphore, RWMutex, Election and MultiLock, Do and LeaseContext to bind work
// to a lease, Inspect to see who holds a key and who waits, events and slog logging, and the
// names of package core a caller needs (Lease, Store, the errors, the bounds). It is the portable
// layer over any Store: it checks every argument before the store sees it, owns waiting (by
// notification where the store offers it), keeps leases alive with a background refresh, and
// reports loss.
//
// # The primitives
//
// Every primitive is a key with a limit of permits, and every grant is a [Lease]: a fencing
// token that strictly increases per key, an expiry decided by the store's clock, a background
// refresh while it is held, and a report when it cannot be kept.
//
//   - [Mutex] ([NewMutex]) is a key of limit 1.
//   - [Semaphore] ([NewSemaphore]) is a key of limit n; Acquire(ctx, k) takes k permits as one
//     lease, and single- and multi-permit acquires share the key.
//   - [RWMutex] ([NewRWMutex]) is a key of [MaxReaders] permits: a reader takes one, a writer
//     all. A waiting writer holds back the readers that come after it.
//   - [Election] ([NewElection]) is a mutex whose lease carries the leader's value and whose
//     fence is the term: Campaign, Leader, Observe (the leader at once, then each change).
//   - [MultiLock] ([NewMultiLock]) holds several keys, each as a Mutex, all or nothing. It takes
//     them one by one in sorted order, so callers naming overlapping keys in any order cannot
//     deadlock, and releases what it took when one is not acquired. A [MultiLease] is lost with
//     any member. It needs no atomic multi-key grant from the store, so it works across Redis
//     Cluster slots and Redlock nodes alike.
//
// Acquire waits in the key's line, strictly first come first served on stores that keep one
// (memory, Redis, PostgreSQL: nobody behind the head, no newcomer and no TryAcquire takes
// permits while it waits); TryAcquire tries once; Adopt takes over a lease acquired elsewhere
// under a known holder id. The options (WithTTL, WithAcquireTimeout, WithValue, WithOnLost, ...)
// are shared by the constructors and checked once, when the primitive is made.
//
// Do acquires, runs a function with a context that is canceled when the lease is lost, and
// releases, even if the function panics; its error joins the function's and the release's.
// [MultiLock.Do] does the same with every key of a MultiLock. [LeaseContext] gives the same
// context for a [Lease] or [MultiLease] the caller manages itself. Inspect reports a
// key's leases (holder, permits, fence, time left, value) and its line of waiters, head first
// ([Status], [RWStatus]); it changes nothing.
//
// Mutex, Semaphore, RWMutex, Election and MultiLock values are safe for concurrent use, and so
// are the leases they return.
//
// # Names from package core
//
// [Lease], [Store], [LimitMismatchError], the errors [ErrNotAcquired], [ErrLost], [ErrNotHeld],
// [ErrInvalid], [ErrClosed] and [ErrLimitMismatch], and the bounds [MaxKeyLen], [MaxValueLen],
// [MaxLimit] and [MaxDuration] are aliases of core's: errors.Is, errors.As and type assertions
// work the same with either package's name, so a program needs no import of core. Package core
// is the contract a driver implements.
//
// Every error names the operation and the key once, at the front, and wraps one of the errors
// above (or ctx's, or the driver's words):
//
//	leasehold: acquire "k": not acquired: busy
//	leasehold: acquire "gpu-pool": limit mismatch: the key is held under limit 2, this request has 5
//
// # Costs
//
// In store round trips: TryAcquire 1; Acquire 1 when the key has room, otherwise 1 per try (plus
// registering as a waiter once, free on the memory store); a refresh 1 per refresh interval;
// Release 1; Adopt 1; Inspect 1. A held lease keeps one timer, which fires at its next refresh
// or its deadline; a refresh runs on the timer's goroutine, so a lease costs no goroutine
// between refreshes and none once it has ended. Observe costs one goroutine until its ctx ends.
//
// # Events and logging
//
// WithEvents calls a function, synchronously, for every acquired (with the wait), refused,
// waiting, refreshed, refresh failed and recovered, lost and released (with the hold) [Event];
// WithLogger logs the same to a *slog.Logger (Debug; refused at Info, a failed refresh at Warn, a
// loss at Error). Package leaseotel (module github.com/leasehold/leasehold/otel) turns them into
// OpenTelemetry metrics and spans.
//
// # When a lease is lost
//
// A lease is lost when a refresh, Extend, Held or Release finds the store no longer holds it
// (Err says so: "the store no longer held it", or the store's own words), or when no refresh
// renewed it by its stop margin before its deadline (WithStopMargin: a tenth of the TTL unless
// set), so that work bound to it has that margin to stop before the store can grant the key to
// another holder. In the second case Err names how many refreshes failed
// in a row and the last one's error, which it wraps beside ErrLost:
//
//	leasehold: hold "job": lease lost: 3 refreshes failed, last: goredis: redis 127.0.0.1:6379 unreachable: dial tcp 127.0.0.1:6379: connect: connection refused
//
// and a refresh cut off by the stop point names the failure before it; "deadline passed without a
// successful refresh" means none was tried in time (the process was paused, or WithoutRefresh).
// A failed refresh may still have reached the store, which would then keep the lease for up to
// a TTL, so a lease lost at its deadline after failed refreshes sends a release (holder and
// fence) in the background, bounded by min(TTL, 2s); Release waits for it. It does not after
// StopRefresh (the lease is another's to keep), nor under WithHolder or Adopt: an acquire by
// that id while the store still holds the lease gets it again, same fence, and the release
// would end it; such a lease is left to expire.
//
// The stop margin is the holder's side; WithLockDelay is the store's. A lease that expires
// unreleased keeps its permits closed to new grants for the delay more, by the store's clock,
// whatever state its holder's machine is in; a released lease leaves no delay. Inspect lists such
// leases in Status.Delayed, and their permits in Status.Closed.
//
// Events tell the same story as it happens: EventRefreshFailed once per run of failed refreshes
// (WithLogger logs it at Warn), EventRefreshRecovered when one succeeds again (Info), and
// EventLost (Error). See docs/losing-a-lease.md for how long a lease takes to be lost when its
// Redis server dies.
//
// # Closing the store
//
// Closing a Store does not release the leases it granted, and gives them no signal. A refreshed
// lease finds out at its next refresh (within TTL/3 by default), or at an Extend, Held or
// Release before that, and is then lost at once: Done closes, Err wraps ErrLost and
// ErrClosed, OnLost runs. Until then Err returns nil. Under WithoutRefresh it is lost at one
// of those calls or at its stop margin before its deadline. The backend keeps the lease until it expires, so release
// leases before closing their Store.
//
// # Testing on fake time
//
// Leases, refreshes and waiters keep time with the time package, and the memory store's default
// clock reads time.Now at each call. So code that holds leases is unit-tested on fake time by
// running it in a testing/synctest bubble, with the store, the primitive and the leases all
// made inside it:
//
//	synctest.Test(t, func(t *testing.T) {
//		m, _ := primitives.NewMutex(memory.New(), "job", primitives.WithTTL(10*time.Second), primitives.WithoutRefresh())
//		lease, _ := m.Acquire(context.Background())
//		time.Sleep(10 * time.Second) // instant: the bubble's clock moves when all is blocked
//		<-lease.Done()               // lost at its deadline; errors.Is(lease.Err(), primitives.ErrLost)
//	})
//
// Expiry in the store, the lease's deadline, refreshes (a refreshed lease lives through hours of
// fake time in microseconds), retry intervals and acquire timeouts all follow the bubble's clock;
// nothing in this package or the memory store starts a goroutine or timer outside it. A lease
// still held when the bubble's function returns leaves only a timer, which never fires: the
// bubble's time stops with its function. docs/testing.md has more. (The memory store's
// WithClock is for driver tests: it moves the store's time only, and leases notice its expiries
// only at their next real-time refresh.)
package primitives
