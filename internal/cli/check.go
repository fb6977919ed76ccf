package cli

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
	// leases are the key's leases the last time it was looked at (holder → fence): a lease the
	// line granted shows up in the Inspect after the release that made it, and its holder's
	// Acquire then takes it, which is no new grant.
	leases map[string]uint64
}

// granted records a new grant of fence, in the order the store made it.
func (r *keyRecord) granted(key string, fence uint64) {
	r.grants++
	if r.grants > 1 && fence <= r.lastFence {
		r.backwards++
		if r.firstBad == "" {
			r.firstBad = fmt.Sprintf("grant %d on %q got fence %d, after fence %d", r.grants, key, fence, r.lastFence)
		}
	}
	r.lastFence = fence
	r.maxFence = max(r.maxFence, fence)
}

// look records what Inspect reports after a grant or a release: new leases (granted from the
// line) in the order of their fences, and the key's use.
func (r *keyRecord) look(key string, snap core.Snapshot) {
	seen := make(map[string]uint64, len(snap.Leases))
	for _, l := range snap.Leases { // ordered by fence
		f, ok := r.leases[l.Holder]
		if !ok {
			f = l.Fence
			r.granted(key, f)
		}
		seen[l.Holder] = f
	}
	r.leases = seen
	r.peakInUse = max(r.peakInUse, snap.InUse())
	r.peakHolders = max(r.peakHolders, len(snap.Leases))
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
// fence (unless the grant was seen already: a lease the line granted, which its holder takes
// now) and the key's use as Inspect reports it.
func (s *observedStore) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res, err := s.Store.Acquire(ctx, req)
	if err != nil || !res.Granted {
		return res, err
	}
	r := s.recordLocked(req.Key)
	if _, ok := r.leases[req.Holder]; !ok {
		r.granted(req.Key, res.Fence)
		r.leases[req.Holder] = res.Fence
	}
	s.lookLocked(ctx, req.Key, r)
	return res, nil
}

// Release passes the release to the wrapped store, in turn with grants, and looks at the key
// after it: the release may have granted its permits to waiters in line.
func (s *observedStore) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held, err := s.Store.Release(ctx, req)
	if err == nil && held {
		s.lookLocked(ctx, req.Key, s.recordLocked(req.Key))
	}
	return held, err
}

// recordLocked returns key's record, making it if need be. s.mu must be held.
func (s *observedStore) recordLocked(key string) *keyRecord {
	r := s.keys[key]
	if r == nil {
		r = &keyRecord{leases: map[string]uint64{}}
		s.keys[key] = r
	}
	return r
}

// lookLocked asks the store about key and records what it says. The grant or release is made;
// a caller's ctx ending now must not cost the check its look. s.mu must be held.
func (s *observedStore) lookLocked(ctx context.Context, key string, r *keyRecord) {
	snap, err := s.Store.Inspect(context.WithoutCancel(ctx), key)
	if err != nil {
		if r.inspectErr == nil {
			r.inspectErr = err
		}
		return
	}
	r.look(key, snap)
}

// Register implements core.Notifier with the wrapped store's notifications, or returns
// errNoNotifier when it has none.
func (s *observedStore) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
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
