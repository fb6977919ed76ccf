package primitives

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// MultiLock is a lock on several keys at once, all or nothing: a holder holds every key or none,
// each key excluded as by a Mutex on it (a Mutex on a held key is refused, and the other way
// round). Callers that name overlapping keys in any order cannot deadlock: every MultiLock takes
// its keys in one canonical order, sorted by key, so no two callers each hold a key the other
// waits for. A MultiLock is safe for concurrent use; each Acquire is a new set of leases.
type MultiLock struct {
	keys    []string // as given
	mutexes []*Mutex // one per key, in sorted key order
	order   []int    // order[i]: the index in keys of mutexes[i]
	cfg     config
}

// NewMultiLock returns a MultiLock on keys, which it takes in sorted order whatever the order
// given. It checks its arguments and options and returns an error wrapping ErrInvalid that names
// the bad one — an empty list, a key given twice, a key a Mutex refuses — without touching the
// store. The options are a Mutex's: the TTL, refresh and stop margin of each key's lease, the
// value kept with each, events for each; WithAcquireTimeout bounds the whole Acquire.
func NewMultiLock(store Store, keys []string, opts ...Option) (*MultiLock, error) {
	fail := func(err error) (*MultiLock, error) {
		return nil, fmt.Errorf("leasehold: new multilock %s: %w", quoteKeys(keys), err)
	}
	if len(keys) == 0 {
		return fail(fmt.Errorf("%w: keys: must name at least one key", ErrInvalid))
	}
	if store == nil {
		return fail(fmt.Errorf("%w: store: must not be nil", ErrInvalid))
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return fail(err)
	}
	ml := &MultiLock{keys: slices.Clone(keys), cfg: cfg}
	ml.order = make([]int, len(keys))
	for i := range ml.order {
		ml.order[i] = i
	}
	slices.SortFunc(ml.order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	for i, k := range ml.order {
		if i > 0 && keys[k] == keys[ml.order[i-1]] {
			return fail(fmt.Errorf("%w: key %s: given twice", ErrInvalid, quoteKey(keys[k])))
		}
		if err := checkKey(keys[k], MaxKeyLen); err != nil {
			return fail(err)
		}
		m, err := NewMutex(store, keys[k], opts...)
		if err != nil {
			return fail(err)
		}
		ml.mutexes = append(ml.mutexes, m)
	}
	return ml, nil
}

// Keys returns the keys, in the order given.
func (ml *MultiLock) Keys() []string { return slices.Clone(ml.keys) }

// Acquire takes every key, one after another in sorted order, waiting for each as Mutex.Acquire
// does, within one acquire timeout for the whole (WithAcquireTimeout) and ctx. On success it
// returns the MultiLease; on failure — a key not acquired in time (ErrNotAcquired), ctx's end, a
// store error — it releases what it took before returning, and holds nothing. Cost: a Mutex
// acquire per key, in sequence.
func (ml *MultiLock) Acquire(ctx context.Context) (*MultiLease, error) {
	return ml.acquire(ctx, false)
}

// TryAcquire makes one attempt at each key in sorted order, stopping at the first held one: it
// returns an error wrapping ErrNotAcquired when any key is held, having released what it took.
// Cost: one store round trip per key taken, plus one to release each on a refusal.
func (ml *MultiLock) TryAcquire(ctx context.Context) (*MultiLease, error) {
	return ml.acquire(ctx, true)
}

func (ml *MultiLock) acquire(ctx context.Context, try bool) (*MultiLease, error) {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if !try && ml.cfg.acquireTimeout <= MaxDuration {
		wctx, cancel = context.WithTimeoutCause(ctx, ml.cfg.acquireTimeout, errAcquireTimeout)
	}
	defer cancel()
	taken := make([]Lease, len(ml.keys)) // in the order given
	for i, m := range ml.mutexes {
		var l Lease
		var err error
		if try {
			l, err = m.TryAcquire(wctx)
		} else {
			l, err = m.Acquire(wctx)
		}
		if err != nil {
			ml.releaseAll(ctx, taken)
			if ctx.Err() == nil && context.Cause(wctx) == errAcquireTimeout {
				// As a Mutex's acquire timeout: ErrNotAcquired, not the ctx error that the
				// timeout made, which would read as the caller's own deadline.
				err = fmt.Errorf("%w: acquire timeout %v exceeded (%s: %v)", ErrNotAcquired, ml.cfg.acquireTimeout, quoteKey(m.Key()), err)
			}
			return nil, fmt.Errorf("leasehold: acquire multilock %s: %w", quoteKeys(ml.keys), err)
		}
		taken[ml.order[i]] = l
	}
	for _, l := range taken {
		// A lease lost while the later keys were awaited: the whole was never held at once.
		if err := l.Err(); err != nil {
			ml.releaseAll(ctx, taken)
			return nil, fmt.Errorf("leasehold: acquire multilock %s: lost while the other keys were taken: %w", quoteKeys(ml.keys), err)
		}
	}
	return newMultiLease(ml, taken), nil
}

// errAcquireTimeout is the cause of a MultiLock acquire's ctx ended by its acquire timeout.
var errAcquireTimeout = errors.New("multilock acquire timeout")

// releaseAll releases the leases taken so far, in reverse sorted order, bounded by the TTL and
// 10s even when ctx has ended; a failure leaves a lease to expire.
func (ml *MultiLock) releaseAll(ctx context.Context, taken []Lease) {
	for i := len(ml.order) - 1; i >= 0; i-- {
		if l := taken[ml.order[i]]; l != nil {
			releaseQuietly(ctx, l, ml.cfg.ttl)
		}
	}
}

// MultiLease is the leases a MultiLock holds, one per key: held all together. Losing any of them
// loses the whole: Done closes, Err wraps ErrLost naming the key, and the others are released in
// the background; releasing one of them alone (through Leases) releases the whole the same way.
// It is safe for concurrent use.
type MultiLease struct {
	ml     *MultiLock
	leases []Lease // in the order the keys were given

	done     chan struct{}
	mu       sync.Mutex
	err      error // the loss, once lost
	released bool
	ended    bool // done is closed

	// background, once a lease ended alone, is closed when watch has made the releases of the
	// others; Release waits for it (or ctx's end), so that it returns with every release made.
	background chan struct{}
}

func newMultiLease(ml *MultiLock, leases []Lease) *MultiLease {
	m := &MultiLease{ml: ml, leases: leases, done: make(chan struct{})}
	for _, l := range leases {
		go m.watch(l)
	}
	return m
}

// watch waits for l to end. Lost, it loses the whole; released alone (through Leases), it ends
// the whole as a Release would. Either way the other leases are released.
func (m *MultiLease) watch(l Lease) {
	<-l.Done()
	err := l.Err()
	m.mu.Lock()
	if m.released || m.ended {
		m.mu.Unlock()
		return
	}
	if err != nil {
		m.err = fmt.Errorf("leasehold: multilock %s: key %s: %w", quoteKeys(m.ml.keys), quoteKey(l.Key()), err)
	}
	m.ended = true
	close(m.done)
	background := make(chan struct{})
	m.background = background
	m.mu.Unlock()
	defer close(background)
	for _, o := range m.leases {
		if o != l {
			releaseQuietly(context.Background(), o, m.ml.cfg.ttl)
		}
	}
}

// Leases returns the leases, one per key, in the order the keys were given to NewMultiLock.
func (m *MultiLease) Leases() []Lease { return slices.Clone(m.leases) }

// Done returns a channel closed when the MultiLease ends: released, or lost with any member.
func (m *MultiLease) Done() <-chan struct{} { return m.done }

// Err returns nil while every lease is held and after a clean Release, and an error wrapping
// ErrLost, naming the key, once a member was lost.
func (m *MultiLease) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Release releases every lease, in reverse sorted key order, and returns the errors of those that
// failed (joined), or the loss when the whole was lost before. Releasing again does nothing. A
// lease whose release failed is left to expire by its TTL. After a member ended alone (lost, or
// released through Leases), it first waits, within ctx, for the releases of the others begun
// then, so that it returns with every key released or an error. Cost: one store round trip per
// key.
func (m *MultiLease) Release(ctx context.Context) error {
	m.mu.Lock()
	if m.released {
		m.mu.Unlock()
		return nil
	}
	m.released = true
	lost, background := m.err, m.background
	if !m.ended {
		m.ended = true
		close(m.done)
	}
	m.mu.Unlock()
	// A lease that ended alone has the others released in the background: wait for those
	// releases, or ctx's end (then an error, as they may not be made), and release again any
	// that failed, so that Release returns with no key left held unless its error says so.
	var errs []error
	if background != nil {
		select {
		case <-background:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("leasehold: release multilock %s: the releases begun as a member ended: %w", quoteKeys(m.ml.keys), context.Cause(ctx)))
		}
	}
	for i := len(m.ml.order) - 1; i >= 0; i-- {
		if err := m.leases[m.ml.order[i]].Release(ctx); err != nil && lost == nil {
			errs = append(errs, err)
		}
	}
	if lost != nil {
		return lost
	}
	return errors.Join(errs...)
}

// quoteKeys names a list of keys in messages: each quoted (and cut) as quoteKey does, the list cut
// after a few.
func quoteKeys(keys []string) string {
	const shown = 4
	var b strings.Builder
	b.WriteByte('[')
	for i, k := range keys {
		if i == shown {
			fmt.Fprintf(&b, " … (%d keys)", len(keys))
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quoteKey(k))
	}
	b.WriteByte(']')
	return b.String()
}
