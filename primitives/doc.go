// Package primitives is Leasehold's portable layer: a Mutex and a weighted Semaphore over any
// core.Store. It checks every argument before the store sees it, owns waiting (by notification
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
// # Closing the store
//
// Closing a Store does not release the leases it granted, and gives them no signal. A refreshed
// lease finds out at its next refresh (within TTL/3 by default), or at an Extend, Held or
// Release before that, and is then lost at once: Done closes, Err wraps core.ErrLost and
// core.ErrClosed, OnLost runs. Until then Err returns nil. Under WithoutRefresh it is lost at one
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
//		<-lease.Done()               // lost at its deadline; errors.Is(lease.Err(), core.ErrLost)
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
