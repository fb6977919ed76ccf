package primitives

import "github.com/leasehold/leasehold/core"

// The names a program using the primitives needs, so that it imports this package and a
// backend and nothing else. Each is the core name itself (an alias), so errors.Is, type
// assertions and interface values work the same with either package's name.

// Lease is a held grant of permits on a key: its fence, deadline, Done channel, Err, Release
// and Extend. See core.Lease for each method's contract.
type Lease = core.Lease

// Store is what a backend provides (memory.New, goredis.New, valkey.New, postgres.New,
// redlock.New); the primitives take any Store.
type Store = core.Store

// LeaseInfo is one lease as Inspect reports it (Status.Leases, ordered by fence). Its fields:
//
//	Holder  string        // the holder id (Lease.Holder; WithHolder, Adopt)
//	Permits int           // the permits it holds
//	Fence   uint64        // its fencing token (Lease.Fence)
//	TTL     time.Duration // the time it has left by the store's clock
//	Value   string        // the value of the request that granted or last renewed it (WithValue)
type LeaseInfo = core.LeaseInfo

// WaiterInfo is one place in a key's line as Inspect reports it (Status.Waiters, head first: the
// order the line serves them). Its fields:
//
//	Holder  string // the waiting request's holder id
//	Permits int    // the permits it waits for
//	Value   string // its value (WithValue)
type WaiterInfo = core.WaiterInfo

// DelayInfo is, in Inspect's report (Status.Delayed, ordered by fence), a lease that expired
// unreleased and whose lock delay (WithLockDelay) still keeps its permits closed: they count in
// Status.Closed, not in Free, until Left has passed. Its fields:
//
//	Holder  string        // the expired lease's holder id, as granted
//	Permits int           // the permits it held, which the delay keeps closed
//	Fence   uint64        // its fencing token, as granted
//	Left    time.Duration // the time, by the store's clock, until the delay ends and the permits are free
type DelayInfo = core.DelayInfo

// LimitMismatchError is the error, matching ErrLimitMismatch, of a request whose limit is not
// the one the key is held or waited for under; it carries both limits.
type LimitMismatchError = core.LimitMismatchError

// The errors a caller branches on with errors.Is. Every error the primitives return wraps at
// most a few of them beside the operation, the key and the cause.
var (
	// ErrNotAcquired: TryAcquire found the key full, or Acquire's wait ended without a grant.
	ErrNotAcquired = core.ErrNotAcquired
	// ErrLost: the lease ended without the holder releasing it (expired, taken over, or
	// refreshes failed past its deadline); work bound to it ran unprotected from then on.
	ErrLost = core.ErrLost
	// ErrNotHeld: Adopt found no lease of that holder on the key, or Extend was called on a
	// released lease.
	ErrNotHeld = core.ErrNotHeld
	// ErrInvalid: an argument is out of its bounds; the error names it, and nothing was sent.
	ErrInvalid = core.ErrInvalid
	// ErrClosed: the Store was closed.
	ErrClosed = core.ErrClosed
	// ErrLimitMismatch: the key is held or waited for under another limit; nothing was sent
	// to wait, and the error is a *LimitMismatchError.
	ErrLimitMismatch = core.ErrLimitMismatch
	// ErrStaleFence: a fenced write was refused where it lands, a higher fence having been
	// accepted for the resource; the error also wraps ErrLost.
	ErrStaleFence = core.ErrStaleFence
)

// Bounds on arguments, checked before anything reaches the store.
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = core.MaxKeyLen
	// MaxValueLen is the longest lease value (WithValue, Campaign), in bytes.
	MaxValueLen = core.MaxValueLen
	// MaxLimit is the largest limit of a Semaphore.
	MaxLimit = core.MaxLimit
	// MaxDuration is the longest TTL, wait or interval any option takes.
	MaxDuration = core.MaxDuration
)
