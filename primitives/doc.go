// Package primitives is Leasehold's portable layer: a Mutex and a weighted Semaphore over any
// Store. It checks every argument before the store sees it, owns waiting (by notification
// where the store offers it), keeps leases alive with a background refresh, and reports loss.
//
// A Mutex is a Semaphore of limit 1 on the same key model; a Semaphore's single- and
// multi-permit acquires share one key space. Mutex and Semaphore values are safe for concurrent
// use, and so are the leases they return.
//
// Costs, in store round trips: TryAcquire 1; Acquire 1 when the key has room, otherwise 1 per try
// (plus registering as a waiter once, free on the memory store); a refresh 1 per refresh interval;
// Release 1; Adopt 1. A held lease keeps one timer, which fires at its next refresh or its
// deadline; a refresh runs on the timer's goroutine, so a lease costs no goroutine between
// refreshes and none once it has ended.
//
// # When a lease is lost
//
// A lease is lost when a refresh, Extend, Held or Release finds the store no longer holds it
// (Err says so: "the store no longer held it", or the store's own words), or when its deadline
// passes without a successful refresh. In the second case Err names how many refreshes failed
// in a row and the last one's error, which it wraps beside ErrLost:
//
//	leasehold: hold "job": lease lost: 3 refreshes failed, last: goredis: dial tcp 127.0.0.1:6379: connect: connection refused
//
// and a refresh cut off by the deadline names the failure before it; "deadline passed without a
// successful refresh" means none was tried in time (the process was paused, or WithoutRefresh).
// A failed refresh may still have reached the store, which would then keep the lease for up to
// a TTL, so a lease lost at its deadline after failed refreshes sends a release (holder and
// fence) in the background, bounded by min(TTL, 2s); Release waits for it. It does not after
// StopRefresh (the lease is another's to keep), nor under WithHolder or Adopt: an acquire by
// that id while the store still holds the lease gets it again, same fence, and the release
// would end it; such a lease is left to expire.
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
// of those calls or at its deadline. The backend keeps the lease until it expires, so release
// leases before closing their Store.
//
// # Testing on fake time
//
// Leases, refreshes and waiters keep time with the time package, and the memory store's default
// clock is core.SystemClock{}, which reads time.Now at each call. So code that holds leases is
// unit-tested on fake time by running it in a testing/synctest bubble, with the store, the
// Mutex or Semaphore and the leases all made inside it:
//
//	synctest.Test(t, func(t *testing.T) {
//		m, _ := primitives.NewMutex(memory.New(), "job", primitives.WithTTL(10*time.Second), primitives.WithoutRefresh())
//		lease, _ := m.Acquire(context.Background())
//		time.Sleep(10 * time.Second) // instant: the bubble's clock moves when all is blocked
//		<-lease.Done()               // lost at its deadline; errors.Is(lease.Err(), ErrLost)
//	})
//
// Expiry in the store, the lease's deadline, refreshes (a refreshed lease lives through hours of
// fake time in microseconds), retry intervals and acquire timeouts all follow the bubble's clock;
// nothing in this package or the memory store starts a goroutine or timer outside it. A lease
// still held when the bubble's function returns leaves only a timer, which never fires: the
// bubble's time stops with its function. A core.ManualClock
// is not the tool for this: it moves the store's time only, and leases notice its expiries only
// at their next real-time refresh.
package primitives
