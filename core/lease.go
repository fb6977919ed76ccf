package core

import (
	"context"
	"time"
)

// Lease is a grant of permits on a key to one holder, kept alive in the background until it is
// released or lost. Its methods are safe for concurrent use.
//
// A lease learns that it is lost from its own refreshes, its deadline, and the calls made on it;
// a loss known for certain is reported at once: when a refresh, Extend or Held finds the lease
// gone, or when any of them or Release finds the Store closed. Closing the Store that granted a
// lease does not release it, and gives it no signal: the lease is lost (Err wraps ErrLost and
// ErrClosed) at its next refresh — within one refresh interval, TTL/3 by default — or at the
// next Extend, Held or Release if one comes first; without background refresh, at one of those
// calls or at its deadline. Until then Err returns nil. The backend's copy is not released: on a
// shared backend (Redis) other processes see it held until it expires, one TTL after its last
// refresh. Release leases before closing their Store.
type Lease interface {
	// Key returns the resource key.
	Key() string
	// Holder returns the holder id: the identity the store knows this lease by. Another process
	// can take the lease over with Adopt and this id.
	Holder() string
	// Permits returns the number of permits held.
	Permits() int
	// Value returns the value the lease was granted with (see AcquireRequest.Value); "" when
	// none was set.
	Value() string
	// Fence returns the fencing token: strictly greater than the token of every earlier grant on
	// the key, so a downstream system can reject writes from a stale holder.
	Fence() uint64
	// Deadline returns the conservative local deadline: the lease is certainly held until then,
	// measured on this machine's clock from before the latest successful acquire, refresh or
	// Extend was sent, less an allowance for clock drift. Refreshes and Extend calls reach the
	// store one at a time, and the deadline is always that of the last one to reach it.
	Deadline() time.Time
	// Done returns a channel that is closed when the lease ends, by release or loss (at once
	// when the loss is known for certain; see the type's doc for when that is).
	Done() <-chan struct{}
	// Err returns nil while the lease is held and after a clean Release, and an error wrapping
	// ErrLost once it has been lost (and ErrClosed too when the loss was the Store's closing).
	// It is the lease's local knowledge and costs nothing; Held asks the store.
	Err() error
	// Release ends the lease and frees its permits: one store round trip. The first call that
	// reaches the store releases; later calls return nil. If the lease had been lost, before or
	// during the call, Release returns an error wrapping ErrLost: the critical section ran
	// unprotected. A lease that has reported its loss never ends a grant made after it (under a
	// holder id shared with other leases, its Release sends nothing). If the store cannot be reached, or ctx ends first, Release returns that error
	// and the lease stays, no longer refreshed, until its deadline; call Release again to retry (a
	// retry that finds the lease gone reports it released: the failed call may have released it and
	// lost the reply). If the Store was closed, the lease is lost at once and Release returns an
	// error wrapping ErrLost and ErrClosed.
	Release(ctx context.Context) error
	// StopRefresh stops the background refresh. The lease stays valid until its deadline, and is
	// reported lost then unless released before.
	StopRefresh()
	// Extend renews the lease now for ttl (at least 10ms, at most MaxDuration; otherwise an
	// error wrapping ErrInvalid, and nothing is sent), whether or not it is refreshed in the
	// background, and returns the new deadline; a ttl shorter than the time left shortens it.
	// If the store no longer holds the lease, or was closed, the lease is lost at once: Extend
	// returns an error wrapping ErrLost (and ErrClosed) and never acquires again. It costs one
	// store round trip. The deadline it returns is the lease's unless a refresh reaches the
	// store after it, in which case Deadline reports the refresh's. An Extend that fails
	// otherwise (the store unreachable, ctx ended) may have gone through: the deadline becomes
	// the one it would have set when that is sooner (a shorter ttl), and a refresh comes before
	// it; a failed background refresh likewise.
	Extend(ctx context.Context, ttl time.Duration) (time.Time, error)
	// Held asks the store whether it still holds this lease (this holder, this fence): one round
	// trip, for code that wants certainty before a side effect; Err is the cheap local answer. When
	// the store does not hold it and it was not released, the lease is lost at once (Done closes,
	// Err wraps ErrLost, the primitives' OnLost runs) and Held returns false, nil; when the Store
	// was closed, the lease is lost likewise and Held returns an error wrapping ErrClosed. Held of
	// an ended lease, released or lost (Err non-nil, even while the store still holds it inside
	// the stop margin), returns false, nil and sends nothing; Err tells the two apart. Held never
	// returns true once Err wraps ErrLost: a lease that ends, or reaches its stop point, while the
	// call is on its way is reported lost then and Held returns false, nil.
	Held(ctx context.Context) (bool, error)
}
