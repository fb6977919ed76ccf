package core

import "context"

// Notifier is an optional Store capability: notifications that permits on a key may have been
// freed. The primitives discover it by type assertion; a Store without it still works, its
// waiters retrying at the retry interval or the store's RetryAfter, whichever comes first.
type Notifier interface {
	// Register enrolls a waiter for the request req, which was just refused and will be tried
	// again when woken: req.Key, req.Holder and req.Permits say whose wake it is and what would
	// serve it. The Wake's C receives a value when permits may have been freed for this waiter;
	// the wake was meant for it alone, so its caller tries again promptly. A release between the
	// refused try and Register must not be missed: unless the store can rule that out, the Wake
	// starts with a value in C. Closing the Wake takes the caller's place out of the line, and
	// a grant the line made it that no Acquire has taken yet goes to the next waiters, as if
	// released; a waiter that took its grant keeps the lease.
	Register(ctx context.Context, req AcquireRequest) (Wake, error)
}

// Watcher is an optional Store capability: notice that the leases on a key changed, for callers
// that follow a key without waiting for it (an election's observers, a dashboard). Primitives
// discover it by type assertion; without it they poll.
type Watcher interface {
	// Watch starts watching key. The Wake's C receives a value after a lease on key is granted
	// (a new lease, by Acquire or by the line; not a renewal), released, or given back from the
	// line untaken; several changes may be announced by one value. Expiry is not announced: a
	// watcher that wants to see it reads the leases' TTL and looks again when it passes. A
	// change between Watch and the caller's next read of the key must not be missed: unless the
	// store can rule it out, the Wake starts with a value in C. A store that can watch only in
	// some configurations (a Redlock whose nodes cannot) returns an error wrapping
	// errors.ErrUnsupported when it cannot.
	Watch(ctx context.Context, key string) (Wake, error)
}

// AcquireWatcher is an optional capability of a Store without a line whose waiters' wakes
// depend on their own refused tries (a Redlock store, whose nodes each may grant a minority
// share that is given back). The primitives prefer it to Watcher for a caller that waits.
type AcquireWatcher interface {
	// WatchAcquire watches req.Key for the caller whose Acquire of req was just refused and who
	// will try again when woken: the Wake's C receives a value only on a change that could let
	// that next try succeed, not on the caller's own grants given back. Otherwise as Watch.
	WatchAcquire(ctx context.Context, req AcquireRequest) (Wake, error)
}

// Wake is one caller's enrollment for notice on one key: a waiter's, from Notifier.Register,
// or a watch's, from Watcher.Watch or AcquireWatcher.WatchAcquire. A Wake is safe for
// concurrent use.
type Wake interface {
	// C receives a value when the caller should look at the key again (see the method that
	// made the Wake for when).
	C() <-chan struct{}
	// Reliable reports whether every event the Wake announces will reach C while it is open:
	// true for an in-process store, and for a Redis store while its subscription is up. A
	// caller whose Wake is reliable waits for C or the store's RetryAfter and sends nothing in
	// between; otherwise it also looks at an interval of its own. A store whose reliability
	// changes sends a value on every Wake's C, so that each caller looks again.
	Reliable() bool
	// Close ends the enrollment (see the method that made the Wake for what that leaves
	// behind). Close is idempotent and does not block on I/O; a driver that must tell a
	// server sends that in the background.
	Close()
}
