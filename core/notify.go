package core

import "context"

// Notifier is an optional Store capability: notifications that permits on a key may have been
// freed. The primitives discover it by type assertion; a Store without it still works, its
// waiters retrying at the retry interval or the store's RetryAfter, whichever comes first.
type Notifier interface {
	// Register enrolls a waiter for the request req, which was just refused and will be tried
	// again when woken: req.Key, req.Holder and req.Permits say whose wake it is and what would
	// serve it. A release between the refused try and Register must not be missed: unless the
	// store can rule that out, the waiter starts woken, so that its caller tries again at once.
	// The waiter must be closed when its caller stops waiting.
	Register(ctx context.Context, req AcquireRequest) (Waiter, error)
}

// Waiter is one caller's enrollment for notifications on one key.
type Waiter interface {
	// C receives a value when permits on the key may have been freed for this waiter. A waiter
	// that receives from C should try to acquire promptly: the wake was meant for it alone.
	C() <-chan struct{}
	// Reliable reports whether every release on the key will reach the waiters that it should
	// wake, as long as they stay enrolled: true for an in-process store, and for a Redis store
	// while its subscription is up. A caller whose waiter is reliable waits for a wake or for
	// the store's RetryAfter and sends nothing in between; otherwise it also retries at its
	// retry interval. A store whose reliability changes wakes every waiter, so that each one
	// looks again.
	Reliable() bool
	// Close ends the enrollment: the caller's place leaves the line, and a grant the line made
	// it that no Acquire has taken yet goes to the next waiters, as if released. A waiter that
	// took its grant (its Acquire returned it) keeps the lease. Close is idempotent and does
	// not block on I/O; a driver that must tell a server sends that in the background.
	Close()
}

// Watcher is an optional Store capability: notice that the leases on a key changed, for callers
// that follow a key without waiting for it (an election's observers, a dashboard). Primitives
// discover it by type assertion; without it they poll.
type Watcher interface {
	// Watch starts watching key. The returned Watch's C receives a value after a lease on key is
	// granted (a new lease, by Acquire or by the line; not a renewal), released, or given back
	// from the line untaken. Expiry is not announced: a watcher that wants to see it reads the
	// leases' TTL and looks again when it passes. A change between Watch and the caller's next
	// read of the key must not be missed: unless the store can rule it out, the Watch starts
	// with a value in C. The Watch must be closed when the caller stops watching. A store that
	// can watch only in some configurations (a Redlock whose nodes cannot) returns an error
	// wrapping errors.ErrUnsupported when it cannot.
	Watch(ctx context.Context, key string) (Watch, error)
}

// Watch is one caller's watch on one key, from Watcher.Watch.
type Watch interface {
	// C receives a value when the key's leases may have changed. Several changes may be
	// announced by one value: the caller reads the key again to learn its state.
	C() <-chan struct{}
	// Reliable reports whether every change will reach C while the watch is open: true for an
	// in-process store, and for a Redis store while its subscription is up. A caller whose
	// watch is not reliable also reads the key at an interval of its own. A store whose
	// reliability changes sends a value on C, so that the caller looks again.
	Reliable() bool
	// Close ends the watch. It is idempotent and does not block on I/O.
	Close()
}
