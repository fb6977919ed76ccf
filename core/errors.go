package core

import (
	"errors"
	"fmt"
)

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

	// ErrLimitMismatch means a request's limit differs from the limit of the key's unexpired
	// leases or of the waiters in its line: clients disagree on how many permits the key has. The
	// request was refused at once and changed nothing; it did not wait. The error is a
	// *LimitMismatchError, which names both limits.
	ErrLimitMismatch = errors.New("limit mismatch")

	// ErrStaleFence means a fenced write was refused where it lands: a higher fence was accepted
	// for the resource before, so the lease that gave this one was lost (it expired and someone
	// else was granted the key). None of the write happened. An error wrapping it also wraps
	// ErrLost.
	ErrStaleFence = errors.New("stale fence")
)

// LimitMismatchError is the error a Store returns for a request whose limit is not the key's.
// errors.Is(err, ErrLimitMismatch) reports true for it.
type LimitMismatchError struct {
	// Held is the key's limit: that of its unexpired leases, or of its waiters when it has none.
	Held int
	// Requested is the limit the refused request asked for.
	Requested int
}

// Error says what the request asked for and what the key is held under.
func (e *LimitMismatchError) Error() string {
	return fmt.Sprintf("%v: the key is held under limit %d, this request has %d", ErrLimitMismatch, e.Held, e.Requested)
}

// Is reports whether target is ErrLimitMismatch.
func (e *LimitMismatchError) Is(target error) bool { return target == ErrLimitMismatch }
