package core

import "errors"

// Sentinel errors. Errors returned by Leasehold wrap one of these, so callers branch with
// errors.Is, never by comparing messages. Their texts carry no prefix: the layer a user calls
// adds the operation and key once, as in `leasehold: acquire "k": not acquired: busy`, and a
// driver returns a sentinel bare or with detail after it, as in
// `invalid argument: holder already holds 2 permits, asked for 1`.
var (
	// ErrNotAcquired means the lease was busy: TryAcquire found no room, or Acquire ran out of
	// attempts or of its acquire timeout. The message says which.
	ErrNotAcquired = errors.New("not acquired")

	// ErrLost means a lease ended without being released by its holder: it expired, or it was
	// taken, or its refreshes failed until its deadline passed. A critical section that was running
	// under a lost lease ran unprotected from that moment.
	ErrLost = errors.New("lease lost")

	// ErrNotHeld means the named holder holds no lease on the key (for example when adopting a
	// lease that does not exist or has expired).
	ErrNotHeld = errors.New("not held")

	// ErrInvalid means an argument was invalid. The message names the argument. An operation that
	// returns ErrInvalid has changed nothing in the store.
	ErrInvalid = errors.New("invalid argument")

	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("store closed")
)
