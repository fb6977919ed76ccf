package primitives

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/core"
)

// MaxReaders is the most read leases an RWMutex grants at once on one key: core.MaxLimit. A
// read lease takes one of the key's MaxReaders permits and a write lease takes them all, so
// a writer excludes every reader and every other writer.
const MaxReaders = core.MaxLimit

// RWMutex is a distributed read-write lock: any number of readers (up to MaxReaders) or one
// writer hold its key at a time, across every process that shares the store. It is a Semaphore
// of MaxReaders permits whose readers take one and whose writer takes all, so its leases are
// like every other primitive's: fenced, refreshed, released, with Done, Err and Do.
//
// Order. On a store that keeps a line of waiters (one that implements core.Notifier: memory,
// Redis), waiters are served strictly in arrival order: a waiting writer holds back every reader
// that comes after it, so a stream of readers cannot starve it, and readers that came before it
// are not overtaken. On a store without a line (Redlock), a waiting writer first takes a writer
// intent — a lease on a second key, the key followed by "\x00writer" — that readers check before
// each try: readers that arrive while a writer waits hold back, so the writer is not starved
// either; among waiters already trying, the order is that of their retries.
//
// Costs: a write or read acquire is one store round trip when free, like a Semaphore's; on a
// store without a line a reader's try costs two (the intent's Inspect, then the acquire), and a
// writer that must wait takes and releases the intent as well (two more).
//
// Over Redlock (see package redlock), a key of limit MaxReaders is a shared-exclusive key: a
// reader's and a writer's lease each need a majority of nodes, and any two majorities share a
// node, so a writer excludes readers and writers with a majority of nodes up.
//
// An RWMutex is safe for concurrent use; it is not re-entrant, and a read lease cannot be
// upgraded: a holder of a read lease that asks for the write lease waits for itself.
type RWMutex struct {
	sem     *Semaphore // the key: writers take every permit
	readers *Semaphore // the same key, for readers and TryAcquire: gated by the intent without a line
	intent  *Mutex     // the writer intent; nil on a store with a line
}

// writerIntent is the suffix of the key of an RWMutex's writer intent.
const writerIntent = "\x00writer"

// NewRWMutex returns a read-write lock on key. The options of a Mutex apply (WithTTL,
// WithValue, WithAcquireTimeout …) to both kinds of lease. It checks its arguments and returns
// an error wrapping ErrInvalid that names the bad one; it does not touch the store.
func NewRWMutex(store Store, key string, opts ...Option) (*RWMutex, error) {
	sem, err := newSemaphore(store, resource{kind: "rwmutex", key: key, limit: MaxReaders, maxKeyLen: MaxKeyLen - len(writerIntent)}, opts)
	if err != nil {
		return nil, err
	}
	rw := &RWMutex{sem: sem}
	readers := *sem
	rw.readers = &readers
	if sem.notifier == nil {
		rw.intent = &Mutex{sem: &Semaphore{store: store, watcher: sem.watcher, key: key + writerIntent, limit: 1, cfg: sem.cfg}}
		icfg := &rw.intent.sem.cfg
		icfg.holder = "" // a fresh id per intent, whatever the leases' holder
		// The intent is the RWMutex's own business: the caller's callbacks hear of its leases.
		icfg.onLost, icfg.events = nil, nil
		readers.gate = rw.writerWaits
	}
	return rw, nil
}

// Key returns the resource key.
func (rw *RWMutex) Key() string { return rw.sem.key }

// Acquire takes the write lease, waiting until no reader and no other writer holds the key, as
// Semaphore.Acquire does (same errors; the acquire timeout applies to the whole wait). The
// lease's Permits is MaxReaders.
func (rw *RWMutex) Acquire(ctx context.Context) (Lease, error) {
	if rw.intent == nil {
		return rw.sem.Acquire(ctx, MaxReaders)
	}
	begin := time.Now()
	intent, err := rw.intent.Acquire(ctx)
	if err != nil {
		// The intent's key is the RWMutex's own business: name the caller's key instead.
		if inner := errors.Unwrap(err); inner != nil {
			err = inner
		}
		return nil, fmt.Errorf("leasehold: acquire %s: %w", quoteKey(rw.sem.key), err)
	}
	defer releaseQuietly(ctx, intent, rw.sem.cfg.ttl)
	inner := ctx
	timeout := rw.sem.cfg.acquireTimeout
	if timeout <= MaxDuration {
		var cancel context.CancelFunc
		inner, cancel = context.WithDeadline(ctx, begin.Add(timeout))
		defer cancel()
	}
	l, err := rw.sem.Acquire(inner, MaxReaders)
	if err != nil && ctx.Err() == nil && inner.Err() != nil {
		return nil, fmt.Errorf("leasehold: acquire %s: %w: acquire timeout %v exceeded", quoteKey(rw.sem.key), ErrNotAcquired, timeout)
	}
	return l, err
}

// TryAcquire makes one attempt to take the write lease: one store round trip (two on a store
// without a line). When a reader or writer holds the key, or anyone waits for it, it returns an
// error wrapping ErrNotAcquired.
func (rw *RWMutex) TryAcquire(ctx context.Context) (Lease, error) {
	// Without a line, a waiting writer is known by its intent alone: the readers' gate checks it.
	return rw.readers.TryAcquire(ctx, MaxReaders)
}

// AcquireRead takes a read lease, waiting while a writer holds the key or waits for it, as
// Semaphore.Acquire does. The lease's Permits is 1.
func (rw *RWMutex) AcquireRead(ctx context.Context) (Lease, error) {
	return rw.readers.Acquire(ctx, 1)
}

// TryAcquireRead makes one attempt to take a read lease: one store round trip (two on a store
// without a line). When a writer holds the key or waits for it, it returns an error wrapping
// ErrNotAcquired.
func (rw *RWMutex) TryAcquireRead(ctx context.Context) (Lease, error) {
	return rw.readers.TryAcquire(ctx, 1)
}

// DoRead takes a read lease, runs fn with it as Mutex.Do does, and releases it.
func (rw *RWMutex) DoRead(ctx context.Context, fn func(ctx context.Context, lease Lease) error) error {
	return rw.readers.Do(ctx, 1, fn)
}

// Do takes the write lease, runs fn with it as Mutex.Do does, and releases it.
func (rw *RWMutex) Do(ctx context.Context, fn func(ctx context.Context, lease Lease) error) error {
	return do(ctx, rw.sem.cfg.ttl, func() (Lease, error) { return rw.Acquire(ctx) }, fn)
}

// RWStatus is what RWMutex.Inspect reports.
type RWStatus struct {
	// Writer is the write lease, when Writing.
	Writer  LeaseInfo
	Writing bool
	// Readers are the read leases, ordered by fence.
	Readers []LeaseInfo
	// Waiters are the waiters in the key's line, head first; Write says which want the write
	// lease. A store without a line reports none.
	Waiters []RWWaiter
	// Delayed are the read or write leases that expired unreleased and whose lock delay
	// (WithLockDelay) still keeps the lock closed to the grants they exclude.
	Delayed []DelayInfo
}

// RWWaiter is one waiter in an RWMutex's line.
type RWWaiter struct {
	Holder, Value string
	Write         bool
}

// Inspect reports who holds the lock and who waits for it: one store round trip that changes
// nothing.
func (rw *RWMutex) Inspect(ctx context.Context) (RWStatus, error) {
	snap, err := rw.sem.store.Inspect(ctx, rw.sem.key)
	if err != nil {
		return RWStatus{}, fmt.Errorf("leasehold: inspect %s: %w", quoteKey(rw.sem.key), err)
	}
	st := RWStatus{Delayed: snap.Delayed}
	for _, l := range snap.Leases {
		if l.Permits == MaxReaders {
			st.Writer, st.Writing = l, true
		} else {
			st.Readers = append(st.Readers, l)
		}
	}
	for _, w := range snap.Waiters {
		st.Waiters = append(st.Waiters, RWWaiter{Holder: w.Holder, Value: w.Value, Write: w.Permits == MaxReaders})
	}
	return st, nil
}

// writerWaits is the readers' gate on a store without a line: blocked while a writer holds the
// intent, until its lease would expire at the latest.
func (rw *RWMutex) writerWaits(ctx context.Context) (bool, time.Duration, error) {
	snap, err := rw.sem.store.Inspect(ctx, rw.intent.sem.key)
	if err != nil || len(snap.Leases) == 0 {
		return false, 0, err
	}
	// Its release announces nothing on the RWMutex's key: look again within a retry interval.
	return true, min(snap.Leases[0].TTL, rw.sem.cfg.retryInterval), nil
}

// releaseQuietly releases l, bounded by ttl and 10s even when ctx has ended; a failure leaves
// it to expire.
func releaseQuietly(ctx context.Context, l Lease, ttl time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(ttl, 10*time.Second))
	defer cancel()
	l.Release(rctx)
}
