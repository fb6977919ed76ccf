package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/core"
)

// gauge counts permits held at once and remembers the highest count it reached. It is safe for
// concurrent use.
type gauge struct {
	cur, peak atomic.Int64
}

// add moves the count by n (negative to lower it) and returns the new count, raising the peak if
// the count went above it.
func (g *gauge) add(n int) int {
	c := g.cur.Add(int64(n))
	for {
		p := g.peak.Load()
		if c <= p || g.peak.CompareAndSwap(p, c) {
			return int(c)
		}
	}
}

// max returns the highest count reached so far.
func (g *gauge) max() int { return int(g.peak.Load()) }

// errNoNotifier is what observedStore.Register returns when the store it wraps has no release
// notifications; the primitives then wait at their retry interval.
var errNoNotifier = errors.New("store has no release notifications")

// observedStore is a core.Store that watches the store it wraps, to check it from the outside: it
// records the fence of every grant in the order the store made them, and asks the store (Inspect)
// how many permits and holders the key has right after each grant, the moment use peaks.
//
// Acquire and Release are serialised by its lock, so the order it records is the store's order
// and no release slips between a grant and its Inspect (an expiry still may, which can only hide
// permits, never invent them). Extend and Inspect pass straight through. It is safe for
// concurrent use.
type observedStore struct {
	core.Store
	notifier core.Notifier // nil when the wrapped store has no notifications

	mu   sync.Mutex
	keys map[string]*keyRecord
}

// keyRecord is what observedStore saw of one key.
type keyRecord struct {
	grants      int    // granted Acquire calls
	lastFence   uint64 // fence of the latest grant
	maxFence    uint64 // highest fence granted
	backwards   int    // grants whose fence was not above the previous grant's
	firstBad    string // the first of those, described
	peakInUse   int    // most permits in use right after a grant, by Inspect
	peakHolders int    // most leases right after a grant, by Inspect
	inspectErr  error  // the first Inspect failure
}

var (
	_ core.Store    = (*observedStore)(nil)
	_ core.Notifier = (*observedStore)(nil)
)

// observe wraps store.
func observe(store core.Store) *observedStore {
	n, _ := store.(core.Notifier)
	return &observedStore{Store: store, notifier: n, keys: make(map[string]*keyRecord)}
}

// Acquire passes the request to the wrapped store and, when it is granted, records the grant's
// fence and the key's use as Inspect reports it. The primitives never ask the store again for a
// lease their holder already holds, so every grant here is a new lease with a new fence.
func (s *observedStore) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res, err := s.Store.Acquire(ctx, req)
	if err != nil || !res.Granted {
		return res, err
	}
	r := s.keys[req.Key]
	if r == nil {
		r = &keyRecord{}
		s.keys[req.Key] = r
	}
	r.grants++
	if r.grants > 1 && res.Fence <= r.lastFence {
		r.backwards++
		if r.firstBad == "" {
			r.firstBad = fmt.Sprintf("grant %d on %q got fence %d, after fence %d", r.grants, req.Key, res.Fence, r.lastFence)
		}
	}
	r.lastFence = res.Fence
	r.maxFence = max(r.maxFence, res.Fence)
	// The grant is made; a caller's ctx ending now must not cost the check its look.
	snap, ierr := s.Store.Inspect(context.WithoutCancel(ctx), req.Key)
	if ierr != nil {
		if r.inspectErr == nil {
			r.inspectErr = ierr
		}
		return res, nil
	}
	r.peakInUse = max(r.peakInUse, snap.InUse())
	r.peakHolders = max(r.peakHolders, len(snap.Leases))
	return res, nil
}

// Release passes the release to the wrapped store, in turn with grants.
func (s *observedStore) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Store.Release(ctx, req)
}

// Register implements core.Notifier with the wrapped store's notifications, or returns
// errNoNotifier when it has none.
func (s *observedStore) Register(ctx context.Context, req core.AcquireRequest) (core.Waiter, error) {
	if s.notifier == nil {
		return nil, errNoNotifier
	}
	return s.notifier.Register(ctx, req)
}

// record returns a copy of what was seen of key (the zero keyRecord if it was never granted).
func (s *observedStore) record(key string) keyRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.keys[key]; r != nil {
		return *r
	}
	return keyRecord{}
}
