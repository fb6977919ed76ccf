package core

import (
	"context"
	"time"
)

// MaxDuration is the longest TTL or Wait a Store is ever asked for: about 100 years. It keeps a
// store's arithmetic exact — a TTL in milliseconds fits a Lua double (2^53) with room to spare,
// and now plus TTL fits a time.Time and an int64 of nanoseconds. The portable layer refuses a
// longer TTL and never sends a longer Wait, so a driver may assume TTL <= MaxDuration and
// Wait <= MaxDuration and need not check for overflow.
const MaxDuration = 100 * 365 * 24 * time.Hour

// MaxLimit is the largest limit (and so the largest number of permits) a Store is ever asked
// for: 2^31 − 1. It keeps permit counts exact and within a 32-bit int wherever a driver stores
// or sums them (in Lua doubles, in SQL integer columns); the portable layer refuses a larger
// limit, so a driver may assume Permits <= Limit <= MaxLimit.
const MaxLimit = 1<<31 - 1

// MaxValueLen is the longest lease value, in bytes, a Store is ever asked to keep: 1024. A value
// is a short label (who holds the lease: "host-a pid 4242", a leader's address), not a payload;
// the portable layer refuses a longer one, so a driver may store it inline with the lease.
const MaxValueLen = 1024

// MaxKeyLen is the longest key, in bytes, a Store is ever asked for: 1024. A key names a
// resource ("invoice:1234", "gpu-pool"), not a payload; the bound keeps every key within what an
// index entry can hold (PostgreSQL's btree refuses entries past about 2.7 KB) and a store's memory
// per key small. The portable layer refuses a longer key, so a driver may assume
// len(key) <= MaxKeyLen.
const MaxKeyLen = 1024

// Store is the driver contract: the atomic operations every storage backend supplies. The portable
// layer (package primitives) checks every argument before calling a Store, so a driver may assume
// valid input: a non-empty key of at most MaxKeyLen bytes, a non-empty holder, 1 <= Permits <=
// Limit <= MaxLimit, 1ms <= TTL <= MaxDuration, 0 <= Wait <= MaxDuration,
// 0 <= LockDelay <= MaxDuration, and len(Value) <= MaxValueLen.
//
// The model is a key with a limit of permits. A grant is a lease: (key, holder, permits, fence,
// expiry, value). Expiry is decided by the store's own clock, never the caller's; a lease with
// expiry E is held while the store's time is before E, and expired leases free their permits
// without any action of their holder. Each operation is atomic with respect to every other
// operation on the same key, from this or any other process sharing the backend.
//
// A store may keep time more coarsely than a millisecond (etcd counts lease TTLs in whole
// seconds): it may round a TTL or a lock delay up to its resolution, never down, so it ends a
// lease or a delay late, never early, and reports TTLs (in Inspect) to that resolution, never
// above the TTL asked for. Its documentation says its resolution.
//
// Errors: an operation that fails for a reason other than the ones documented below returns an
// error describing it (a network error, say); if ctx ended, the error satisfies errors.Is(err,
// ctx.Err()). After Close, operations return an error wrapping ErrClosed.
//
// Implementations must be safe for concurrent use. Package conformance defines a correct Store by
// test: a driver proves itself with one conformance.Run call.
type Store interface {
	// Acquire grants req a lease on req.Key or refuses it. It grants when req.Holder holds
	// req.Permits there already (again: same fence, expiry now+TTL, lock delay and value from
	// req, so a retry after a lost reply is safe), or when req.Permits fit in req.Limit beside
	// the permits held or closed by a lock delay and nobody waits ahead in the key's line. A new
	// grant's fence is above every fence granted on the key before; no two leases share one. A
	// refusal reports in RetryAfter when expiry alone would make room; with req.Wait > 0, a store
	// with a line (every Notifier) keeps the caller's place in it, strictly FIFO, that long. It
	// changes nothing and returns an error wrapping ErrInvalid when the holder holds another
	// number of permits, or a *LimitMismatchError when req.Limit is not the key's limit.
	// docs/writing-a-driver.md says how a line serves its waiters, how a lock delay closes
	// permits, and what a store owes a try that fails in flight.
	Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error)

	// Extend moves the expiry of the holder's lease to now+TTL and reports the lease. If the
	// holder holds no unexpired lease on the key, it returns an error wrapping ErrLost and
	// changes nothing: an expired lease is never silently acquired again.
	Extend(ctx context.Context, req ExtendRequest) (ExtendResult, error)

	// Release ends the lease req names — req.Holder's on req.Key, with fence req.Fence — frees
	// its permits, and notifies waiters. It reports whether that lease was held and unexpired;
	// releasing a lease that is not held is not an error and changes nothing. A lease of the
	// same holder with another fence (a newer grant under a reused holder id) is left as it is,
	// so a stale lease can never end a newer one.
	Release(ctx context.Context, req ReleaseRequest) (bool, error)

	// Inspect reports the unexpired leases on the key with their values and, for a store that
	// keeps a line, the waiters in it in order. It changes nothing.
	Inspect(ctx context.Context, key string) (Snapshot, error)
}

// AcquireRequest asks for Permits of Limit on Key for Holder, to expire TTL after the store
// grants it. From the portable layer, 1 <= Permits <= Limit <= MaxLimit and
// 1ms <= TTL <= MaxDuration.
type AcquireRequest struct {
	// Key names the resource: any non-empty string, opaque to the store.
	Key string
	// Holder names who asks: non-empty, opaque. A holder holds at most one lease per key.
	Holder string
	// Permits is how many of the key's permits the lease takes (a mutex: 1).
	Permits int
	// Limit is how many permits the key has (a mutex: 1). It must be the key's limit while
	// anyone holds or waits for the key; see Store.Acquire.
	Limit int
	// TTL is how long after the grant, by the store's clock, the lease expires.
	TTL time.Duration
	// Wait is how long the caller will go on waiting if this request is refused: a store that
	// keeps a line of waiters keeps the caller's place that long. Zero means the caller will
	// not wait (a single attempt). It is at most MaxDuration: a caller that will wait longer,
	// or with no limit, says MaxDuration.
	Wait time.Duration
	// Unshared says that Holder is this caller's alone — an id the portable layer drew at random
	// for this one acquire, not one chosen with WithHolder — so that no other caller, in this
	// process or another, tries, waits or leaves the line under it. A store may then hand the
	// caller a grant the line made it without a round trip (see AcquireResult.TTL). With a
	// shared id it must not: another caller's leave of the id's place may pass that grant on
	// without this caller knowing. A store may ignore it.
	Unshared bool
	// Value is kept with the lease and reported by Inspect, and with the caller's place while
	// it waits in line: a short label of who holds or waits (at most MaxValueLen bytes; may be
	// empty). It does not take part in admission.
	Value string
	// LockDelay is how long the lease's permits stay closed to new grants after its expiry, by
	// the store's clock, if it expires unreleased (a holder that stalled or died): see
	// Store.Acquire. Zero means none. It is kept with the lease (and with the caller's place in
	// the line, for the grant the line makes it); Extend keeps it.
	LockDelay time.Duration
}

// AcquireResult is a grant or a refusal.
type AcquireResult struct {
	// Granted reports whether the lease was granted.
	Granted bool
	// Fence is the grant's fencing token; zero when refused.
	Fence uint64
	// TTL, on a grant, when not zero, is less than the request's TTL: how long the lease is known
	// to last from when Acquire returns. A store sets it when it hands over a grant it did not
	// make in this call (a grant from the line, heard of earlier and taken without a round trip,
	// whose expiry was set when the line made it); the caller counts the lease's deadline from it,
	// not from its call. Zero means the request's TTL from the call, as usual.
	TTL time.Duration
	// RetryAfter, on refusal, is how long until the leases now on the key would, by expiring
	// alone, leave room for the request; when there is room but others wait ahead in the line,
	// how long until the first lease expires (the next change expiry alone brings). Zero means
	// the store cannot tell. A waiter uses it instead of polling blindly.
	RetryAfter time.Duration
}

// ExtendRequest asks to move the expiry of Holder's lease on Key to TTL from now
// (1ms <= TTL <= MaxDuration).
type ExtendRequest struct {
	Key    string
	Holder string
	// TTL is the lease's new time to live, from the store's now.
	TTL time.Duration
}

// ReleaseRequest names the lease to end: Holder's lease on Key with fence Fence. Fence zero
// matches the holder's lease whatever its fence: it is for a caller that lost a grant's reply and
// whose holder id is its own, used for that one request (the portable layer never sends zero
// for a holder id the caller chose).
type ReleaseRequest struct {
	Key    string
	Holder string
	Fence  uint64
}

// ExtendResult describes the extended lease.
type ExtendResult struct {
	// Permits and Fence are those of the extended lease, as granted.
	Permits int
	Fence   uint64
	// Limit is the limit of the latest grant on the key, as Inspect reports it.
	Limit int
	// Value is the lease's value, as its latest grant set it (Extend does not change it).
	Value string
}

// Snapshot is what Inspect reports about a key.
type Snapshot struct {
	// Limit is the key's limit: that of its unexpired leases and waiters. When it has none, it
	// is 0, or the limit of the key's latest grant if the store still records one.
	Limit int
	// Leases are the unexpired leases, ordered by fence.
	Leases []LeaseInfo
	// Waiters are the places in the key's line, head first: the order in which the line will
	// serve them. A store without a line reports none. A place whose wait has ended may still
	// be listed until the store next serves the line; one granted already is not.
	Waiters []WaiterInfo
	// Delayed are the leases that expired unreleased and whose lock delay still keeps their
	// permits closed, ordered by fence.
	Delayed []DelayInfo
}

// Closed returns the number of permits the snapshot's delayed leases keep closed.
func (s Snapshot) Closed() int {
	n := 0
	for _, d := range s.Delayed {
		n += d.Permits
	}
	return n
}

// InUse returns the number of permits the snapshot's leases hold.
func (s Snapshot) InUse() int {
	n := 0
	for _, l := range s.Leases {
		n += l.Permits
	}
	return n
}

// LeaseInfo describes one lease in a Snapshot.
type LeaseInfo struct {
	// Holder, Permits and Fence are the lease's, as granted.
	Holder  string
	Permits int
	Fence   uint64
	// TTL is the time the lease has left by the store's clock.
	TTL time.Duration
	// Value is the value of the request that granted or last renewed the lease.
	Value string
}

// DelayInfo describes, in a Snapshot, a lease that expired unreleased and whose lock delay still
// keeps its permits closed.
type DelayInfo struct {
	// Holder, Permits and Fence are the expired lease's, as granted.
	Holder  string
	Permits int
	Fence   uint64
	// Left is the time, by the store's clock, until the delay ends and the permits are free.
	Left time.Duration
}

// WaiterInfo describes one place in a key's line in a Snapshot.
type WaiterInfo struct {
	// Holder, Permits and Value are those of the waiting request.
	Holder  string
	Permits int
	Value   string
}
