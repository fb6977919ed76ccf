package core

import "errors"

// Sentinel errors. Errors returned by Leasehold wrap one of these (with context such as the key and
// the operation), so callers branch with errors.Is, never by comparing messages.
var (
	// ErrNotAcquired means the lease was busy: TryAcquire found no room, or Acquire ran out of
	// attempts or of its acquire timeout. The message says which.
	ErrNotAcquired = errors.New("leasehold: not acquired")

	// ErrLost means a lease ended without being released by its holder: it expired, or it was
	// taken, or its refreshes failed until its deadline passed. A critical section that was running
	// under a lost lease ran unprotected from that moment.
	ErrLost = errors.New("leasehold: lease lost")

	// ErrNotHeld means the named holder holds no lease on the key (for example when adopting a
	// lease that does not exist or has expired).
	ErrNotHeld = errors.New("leasehold: not held")

	// ErrInvalid means an argument was invalid. The message names the argument. An operation that
	// returns ErrInvalid has changed nothing in the store.
	ErrInvalid = errors.New("leasehold: invalid argument")

	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("leasehold: store closed")
)
