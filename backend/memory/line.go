package memory

import (
	"context"
	"slices"
	"time"

	"github.com/leasehold/leasehold/core"
)

// place is a request for a grant: a waiter's in a key's line, or a caller's granted at once.
type place struct {
	holder   string
	permits  int
	limit    int
	ttl      time.Duration
	delay    time.Duration // the lock delay of its grant
	floor    uint64        // least fence of its grant (core.FenceRaiser)
	deadline time.Time     // the end of its wait, for a place in the line
	value    string
}

// newPlace returns req as a place, with the least fence its grant may have.
func newPlace(req core.AcquireRequest, floor uint64) place {
	return place{holder: req.Holder, permits: req.Permits, limit: req.Limit, ttl: req.TTL, delay: req.LockDelay, floor: floor, value: req.Value}
}

// enqueue keeps p's holder's place in the line (or gives it the last one) until wait from now,
// with the request a release will grant it.
func (ks *keyState) enqueue(p place, wait time.Duration, now time.Time) {
	p.deadline = now.Add(wait)
	if i := ks.find(p.holder); i >= 0 {
		ks.line[i] = p
		return
	}
	ks.line = append(ks.line, p)
}

// find returns the index of holder's place in the line, or -1.
func (ks *keyState) find(holder string) int {
	return slices.IndexFunc(ks.line, func(p place) bool { return p.holder == holder })
}

// serveLocked grants free permits to the key's line, strictly in order: it stops at the first
// waiter whose permits are not free (or whose holder's expired lease is in its lock delay), so
// that nobody behind it, and no newcomer, takes permits before it. Places whose wait has ended,
// or whose holder holds a lease already, are dropped on the way. The waiters granted are woken. s.mu must be held, and ks's expired leases purged.
func (s *Store) serveLocked(key string, ks *keyState, now time.Time) {
	used := -1
	for len(ks.line) > 0 {
		p := ks.line[0]
		e, has := ks.leases[p.holder]
		if (has && e.held(now)) || !now.Before(p.deadline) {
			ks.line = ks.line[1:]
			continue
		}
		if has {
			break // its own lease's lock delay: the head waits it out
		}
		if used < 0 {
			used = ks.used()
		}
		if used+p.permits > p.limit {
			break
		}
		ks.line = ks.line[1:]
		e = ks.grant(p, now)
		e.untaken = true // the line's grant, until the holder's next Acquire or Extend takes it
		ks.leases[p.holder] = e
		used += p.permits
		s.wakeLocked(key, p.holder)
		s.changedLocked(key)
	}
	if len(ks.line) == 0 {
		ks.line = nil // let the backing array go
	}
}

// leaveLocked takes holder out of key's line and gives back a lease the line granted it that it
// has not taken (unexpired: an expired one keeps its lock delay), serving the next waiters. s.mu
// must be held.
func (s *Store) leaveLocked(key, holder string) {
	now := s.clock.Now()
	ks := s.live(key, now)
	if ks == nil {
		return
	}
	if i := ks.find(holder); i >= 0 {
		ks.line = slices.Delete(ks.line, i, i+1)
	}
	if e, ok := ks.leases[holder]; ok && e.untaken && e.held(now) { // an expired one keeps its lock delay
		delete(ks.leases, holder)
		s.changedLocked(key)
	}
	s.serveLocked(key, ks, now)
	s.dropIdleLocked(key, ks, now)
}

// enrollment is one caller's enrollment on a key: it is woken when the line grants its holder a
// lease, and when the store closes.
type enrollment struct {
	signal
	s           *Store
	key, holder string
	closed      bool // guarded by s.mu
}

// Register implements core.Notifier: the waiter is woken when the key's line grants req.Holder
// a lease. It starts woken when that happened already. It never blocks, so it ignores ctx: a
// caller whose ctx ended still gets the waiter whose Close takes its place out of the line.
func (s *Store) Register(_ context.Context, req core.AcquireRequest) (core.Wake, error) {
	if err := s.lock(context.Background()); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	w := &enrollment{signal: newSignal(), s: s, key: req.Key, holder: req.Holder}
	hs := s.waiters[req.Key]
	if hs == nil {
		hs = make(map[string][]*enrollment)
		s.waiters[req.Key] = hs
	}
	hs[req.Holder] = append(hs[req.Holder], w)
	if ks := s.live(req.Key, s.clock.Now()); ks != nil {
		if e, ok := ks.leases[req.Holder]; ok && e.untaken {
			w.wake()
		}
	}
	return w, nil
}

// wakeLocked wakes the waiters of holder on key. s.mu must be held.
func (s *Store) wakeLocked(key, holder string) {
	for _, w := range s.waiters[key][holder] {
		w.wake()
	}
}

// signal is the channel of a waiter or a watch, with the methods core.Wake and core.Wake
// share: an in-process store misses no grant and no change, so it is always reliable.
type signal struct{ c chan struct{} }

func newSignal() signal { return signal{c: make(chan struct{}, 1)} }

// wake sends on the channel unless a value is already pending.
func (sg signal) wake() {
	select {
	case sg.c <- struct{}{}:
	default:
	}
}

// C implements core.Wake and core.Wake.
func (sg signal) C() <-chan struct{} { return sg.c }

// Reliable implements core.Wake and core.Wake: an in-process store misses nothing.
func (signal) Reliable() bool { return true }

// Close implements core.Wake: the waiter leaves the line, and a lease the line granted its
// holder that was not taken goes to the next waiters.
func (w *enrollment) Close() {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	hs := s.waiters[w.key]
	ws := slices.DeleteFunc(hs[w.holder], func(x *enrollment) bool { return x == w })
	if len(ws) == 0 {
		delete(hs, w.holder)
		if len(hs) == 0 {
			delete(s.waiters, w.key)
		}
	} else {
		hs[w.holder] = ws
	}
	if len(ws) == 0 && !s.closed {
		s.leaveLocked(w.key, w.holder)
	}
}

// nextFence returns the fence to grant after last at time now: max(last+1, now in microseconds
// since the Unix epoch). Taking the clock into account keeps fences increasing even when a store
// restarts without its data, as long as its clock does not move back.
func nextFence(last uint64, now time.Time) uint64 {
	next := last + 1
	if us := now.UnixMicro(); us > 0 && uint64(us) > next {
		next = uint64(us)
	}
	return next
}
