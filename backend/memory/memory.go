// Package memory is an in-process Leasehold store: leases live in this process's memory and end
// with it. It has the same semantics as the Redis drivers (time from its own Clock, expiry that
// frees permits without any holder action, strictly increasing fences, and release notifications
// that wake waiters with no polling), so it serves unit tests, single-process programs, and the
// demo.
//
// Every operation is one critical section over the store's lock: O(leases on the key) work and no
// I/O. A Store is safe for concurrent use.
//
// To test code that holds leases on fake time, run it in a testing/synctest bubble over a Store
// with the default clock: the leases' refreshes and deadlines, the waiters and the store's expiry
// then all follow the bubble's clock, and a test moves time with time.Sleep and synctest.Wait.
package memory

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// Store is an in-memory core.Store, core.Notifier, core.Watcher and core.FenceRaiser. Make one with
// New.
//
// A key nobody holds or waits for is dropped at its last release or leave, or, when its last lease
// expired unreleased, at its next use: per-entity keys leave nothing behind. The store keeps one
// number, the highest fence of the keys it dropped, above which every new key's fences start, so a
// key's fences keep increasing across its lives even if the clock steps back.
type Store struct {
	clock core.Clock

	mu      sync.Mutex
	retired uint64 // the highest fence of a dropped key
	keys    map[string]*keyState
	waiters map[string]map[string][]*enrollment // key → holder → enrolled waiters
	watches map[string][]*watch                 // key → open watches
	closed  bool

	fences fenceRecords // Fenced's records
}

type keyState struct {
	limit  int
	fence  uint64
	leases map[string]entry
	line   []place // the waiters in line, in arrival order
}

type entry struct {
	permits int
	fence   uint64
	expiry  time.Time
	delay   time.Duration // the lock delay: unreleased, the entry keeps its permits until expiry+delay
	untaken bool          // granted from the line; the holder's next Acquire takes it
	value   string
}

var (
	_ core.Store       = (*Store)(nil)
	_ core.Notifier    = (*Store)(nil)
	_ core.FenceRaiser = (*Store)(nil)
	_ core.Watcher     = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store decide expiry by clock instead of core.SystemClock{}. Fake-time tests
// of code that holds leases need no clock: they run in a testing/synctest bubble (see the package
// doc). A clock of its own moves the store's time only, not the timers of leases and waiters.
func WithClock(clock core.Clock) Option {
	return func(s *Store) {
		if clock != nil {
			s.clock = clock
		}
	}
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{clock: core.SystemClock{}, keys: make(map[string]*keyState), waiters: make(map[string]map[string][]*enrollment),
		watches: make(map[string][]*watch)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// lock takes the store lock after checking ctx and the closed flag; on error the lock is not held.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return core.ErrClosed
	}
	return nil
}

// held reports whether the lease is unexpired at now.
func (e entry) held(now time.Time) bool { return now.Before(e.expiry) }

// closedUntil is when the entry's permits are free: its expiry, or, unless released first, the
// end of its lock delay.
func (e entry) closedUntil() time.Time { return e.expiry.Add(e.delay) }

// live returns the key's state with expired leases removed (a lease in its lock delay stays until
// the delay ends), or nil if the key is unknown. s.mu must be held.
func (s *Store) live(key string, now time.Time) *keyState {
	ks := s.keys[key]
	if ks == nil {
		return nil
	}
	for h, e := range ks.leases {
		if !now.Before(e.closedUntil()) {
			delete(ks.leases, h)
		}
	}
	if s.dropIdleLocked(key, ks, now) {
		return nil
	}
	return ks
}

// dropIdleLocked forgets the key when no unexpired lease and no waiter holds it, keeping its
// fence in s.retired, and reports whether it did. s.mu must be held.
func (s *Store) dropIdleLocked(key string, ks *keyState, now time.Time) bool {
	if _, busy := ks.heldLimit(now); busy {
		return false
	}
	s.retired = max(s.retired, ks.fence)
	delete(s.keys, key)
	return true
}

// Acquire implements core.Store.Acquire. The key's line is strictly FIFO: free permits go to
// the waiters in line first (they are woken), and the caller is granted only when served from
// the line or when nobody waits. A refusal with req.Wait > 0 keeps the caller's place for that
// long.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	return s.acquire(ctx, req, fenceMin{})
}

// AcquireAbove implements core.FenceRaiser: Acquire, where a new grant's fence is at least floor.
// A floor within 2^32 of the top of the uint64 range is core.ErrInvalid (fences after it would
// wrap), and changes nothing.
func (s *Store) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	return s.acquire(ctx, req, fenceMin{grant: floor})
}

// RaiseFence implements core.FenceRaiser: Acquire, where the lease's fence, new or held, is at
// least fence. A fence within 2^32 of the top of the uint64 range is core.ErrInvalid.
func (s *Store) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	return s.acquire(ctx, req, fenceMin{grant: fence, held: fence})
}

// fenceMin is the least fence an acquire gives a new grant, and a lease the holder already holds.
type fenceMin struct{ grant, held uint64 }

// maxFloor is the highest fence floor the store takes: above it, the 2^32 grants after it could
// carry the key's counter past 2^64 − 1, where it would wrap and fences would go back.
const maxFloor = math.MaxUint64 - 1<<32

func (s *Store) acquire(ctx context.Context, req core.AcquireRequest, least fenceMin) (core.AcquireResult, error) {
	if m := max(least.grant, least.held); m > maxFloor {
		return core.AcquireResult{}, fmt.Errorf("%w: fence %d: must be at most %d", core.ErrInvalid, m, uint64(maxFloor))
	}
	if err := s.lock(ctx); err != nil {
		return core.AcquireResult{}, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	ks := s.live(req.Key, now)
	if ks == nil {
		ks = &keyState{fence: s.retired, leases: make(map[string]entry, 1)}
		s.keys[req.Key] = ks
	}
	s.serveLocked(req.Key, ks, now)
	if held, ok := ks.heldLimit(now); ok && held != req.Limit {
		return core.AcquireResult{}, &core.LimitMismatchError{Held: held, Requested: req.Limit}
	}
	if e, ok := ks.leases[req.Holder]; ok && !e.held(now) {
		// Its lease expired unreleased and its lock delay lasts: the holder waits it out too.
		if req.Wait > 0 {
			ks.enqueue(newPlace(req, least.grant), req.Wait, now)
		}
		return core.AcquireResult{RetryAfter: e.closedUntil().Sub(now)}, nil
	} else if ok {
		if e.permits != req.Permits {
			return core.AcquireResult{}, fmt.Errorf("%w: holder already holds %d permits, asked for %d",
				core.ErrInvalid, e.permits, req.Permits)
		}
		e.expiry = now.Add(req.TTL)
		e.delay = req.LockDelay
		e.untaken = false
		e.value = req.Value
		if least.held > e.fence {
			e.fence = least.held
			ks.fence = max(ks.fence, least.held)
		}
		ks.leases[req.Holder] = e
		ks.limit = req.Limit
		return core.AcquireResult{Granted: true, Fence: e.fence}, nil
	}
	used := ks.used()
	if used+req.Permits > req.Limit || len(ks.line) > 0 {
		if req.Wait > 0 {
			ks.enqueue(newPlace(req, least.grant), req.Wait, now)
		}
		// With room but others ahead, the first expiry is the next change expiry alone brings.
		return core.AcquireResult{RetryAfter: retryAfter(ks, now, max(used+req.Permits-req.Limit, 1))}, nil
	}
	ks.grant(newPlace(req, least.grant), now)
	s.changedLocked(req.Key)
	return core.AcquireResult{Granted: true, Fence: ks.fence}, nil
}

// heldLimit returns the key's limit — that of its unexpired leases (and those a lock delay keeps),
// or of the waiters in its line when it has none — and whether any lease or waiter holds the key.
func (ks *keyState) heldLimit(now time.Time) (int, bool) {
	for _, e := range ks.leases {
		if now.Before(e.closedUntil()) {
			return ks.limit, true
		}
	}
	for _, p := range ks.line {
		if now.Before(p.deadline) {
			return p.limit, true
		}
	}
	return 0, false
}

// used returns the permits the key's leases hold, or a lock delay keeps closed.
func (ks *keyState) used() int {
	n := 0
	for _, e := range ks.leases {
		n += e.permits
	}
	return n
}

// grant gives the request p a lease with the key's next fence (at least p.floor), and returns it
// for the caller to mark.
func (ks *keyState) grant(p place, now time.Time) entry {
	ks.fence = max(nextFence(ks.fence, now), p.floor)
	ks.limit = p.limit
	e := entry{permits: p.permits, fence: ks.fence, expiry: now.Add(p.ttl), delay: p.delay, value: p.value}
	ks.leases[p.holder] = e
	return e
}

// retryAfter returns how long until leases holding at least need permits have expired and their
// lock delays ended.
func retryAfter(ks *keyState, now time.Time, need int) time.Duration {
	exp := make([]entry, 0, len(ks.leases))
	for _, e := range ks.leases {
		exp = append(exp, e)
	}
	slices.SortFunc(exp, func(a, b entry) int { return a.closedUntil().Compare(b.closedUntil()) })
	for _, e := range exp {
		need -= e.permits
		if need <= 0 {
			return e.closedUntil().Sub(now)
		}
	}
	return 0 // the limit shrank below what is requested from an empty key; cannot happen with valid input
}

// Extend implements core.Store.Extend.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if err := s.lock(ctx); err != nil {
		return core.ExtendResult{}, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	ks := s.live(req.Key, now)
	if ks == nil {
		return core.ExtendResult{}, core.ErrLost
	}
	e, ok := ks.leases[req.Holder]
	if !ok || !e.held(now) {
		return core.ExtendResult{}, core.ErrLost
	}
	e.expiry = now.Add(req.TTL)
	e.untaken = false // a grant from the line, extended (adopted), is taken
	ks.leases[req.Holder] = e
	return core.ExtendResult{Permits: e.permits, Fence: e.fence, Limit: ks.limit, Value: e.value}, nil
}

// Release implements core.Store.Release. The freed permits go to the head of the key's line,
// whose waiters are woken before it returns.
func (s *Store) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	key := req.Key
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	now := s.clock.Now()
	ks := s.live(key, now)
	if ks == nil {
		return false, nil
	}
	e, ok := ks.leases[req.Holder]
	if !ok || !e.held(now) || (req.Fence != 0 && req.Fence != e.fence) {
		return false, nil
	}
	delete(ks.leases, req.Holder)
	s.changedLocked(key)
	s.serveLocked(key, ks, now)
	s.dropIdleLocked(key, ks, now)
	return true, nil
}

// Inspect implements core.Store.Inspect.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	if err := s.lock(ctx); err != nil {
		return core.Snapshot{}, err
	}
	defer s.mu.Unlock()
	ks := s.keys[key]
	if ks == nil {
		return core.Snapshot{}, nil
	}
	now := s.clock.Now()
	snap := core.Snapshot{Limit: ks.limit, Leases: make([]core.LeaseInfo, 0, len(ks.leases))}
	if held, ok := ks.heldLimit(now); ok {
		snap.Limit = held
	}
	for h, e := range ks.leases {
		switch {
		case e.held(now):
			snap.Leases = append(snap.Leases, core.LeaseInfo{Holder: h, Permits: e.permits, Fence: e.fence, TTL: e.expiry.Sub(now), Value: e.value})
		case now.Before(e.closedUntil()):
			snap.Delayed = append(snap.Delayed, core.DelayInfo{Holder: h, Permits: e.permits, Fence: e.fence, Left: e.closedUntil().Sub(now)})
		}
	}
	slices.SortFunc(snap.Leases, func(a, b core.LeaseInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	slices.SortFunc(snap.Delayed, func(a, b core.DelayInfo) int { return cmp.Compare(a.Fence, b.Fence) })
	for _, p := range ks.line {
		if now.Before(p.deadline) {
			snap.Waiters = append(snap.Waiters, core.WaiterInfo{Holder: p.holder, Permits: p.permits, Value: p.value})
		}
	}
	return snap, nil
}

// Close closes the store: every later operation returns an error wrapping core.ErrClosed, and every
// waiter and watch is woken so that it finds out. Leases are not released. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, hs := range s.waiters {
		for _, ws := range hs {
			for _, w := range ws {
				w.wake()
			}
		}
	}
	for _, ws := range s.watches {
		for _, w := range ws {
			w.wake()
		}
	}
	return nil
}
