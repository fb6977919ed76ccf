package etcd

import (
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// waitEnds are the ends of the Waits of places refused tries took, by place: a timer each,
// which leaves the place unless its holder's Waiter is open then.
type waitEnds struct {
	mu      sync.Mutex
	closed  bool
	byPlace map[placeID]*time.Timer
}

// set makes fn run after d, unless set or stop for id comes first, or close; it replaces the
// end set for id before. After close it does nothing.
func (we *waitEnds) set(id placeID, d time.Duration, fn func()) {
	we.mu.Lock()
	defer we.mu.Unlock()
	we.setLocked(id, d, fn)
}

// setIf is set, only while the end set for id is old (nil: none).
func (we *waitEnds) setIf(id placeID, old *time.Timer, d time.Duration, fn func()) {
	we.mu.Lock()
	defer we.mu.Unlock()
	if we.byPlace[id] == old {
		we.setLocked(id, d, fn)
	}
}

// setLocked is set, we.mu held.
func (we *waitEnds) setLocked(id placeID, d time.Duration, fn func()) {
	if we.closed {
		return
	}
	if t := we.byPlace[id]; t != nil {
		t.Stop()
	}
	if we.byPlace == nil {
		we.byPlace = map[placeID]*time.Timer{}
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		we.mu.Lock()
		if we.byPlace[id] != t {
			we.mu.Unlock()
			return
		}
		delete(we.byPlace, id)
		we.mu.Unlock()
		fn()
	})
	we.byPlace[id] = t
}

// get returns the end set for id, or nil.
func (we *waitEnds) get(id placeID) *time.Timer {
	we.mu.Lock()
	defer we.mu.Unlock()
	return we.byPlace[id]
}

// stopIf forgets the end set for id if it is t (not nil): no later try of the holder set another.
func (we *waitEnds) stopIf(id placeID, t *time.Timer) {
	we.mu.Lock()
	defer we.mu.Unlock()
	if t != nil && we.byPlace[id] == t {
		t.Stop()
		delete(we.byPlace, id)
	}
}

// close stops every end, and any set after.
func (we *waitEnds) close() {
	we.mu.Lock()
	defer we.mu.Unlock()
	we.closed = true
	for id, t := range we.byPlace {
		t.Stop()
		delete(we.byPlace, id)
	}
}

// leaveWhenWaitEnds leaves the place req's refused try took once req.Wait has passed, unless a
// Waiter of its holder on the key is open then (its Close leaves) or a later try of the holder
// set a new end: a place is held for the Wait, and no longer, even when its caller neither
// registers nor asks again.
func (s *Store) leaveWhenWaitEnds(req core.AcquireRequest) {
	s.waitEnds.set(refusalID(req.Key, req.Holder), req.Wait, s.leaveUnlessWaiting(req.Key, req.Holder))
}

// leaveUnlessWaiting returns a func that leaves holder's place on key unless a Waiter of the
// holder on the key is open.
func (s *Store) leaveUnlessWaiting(key, holder string) func() {
	return func() {
		if kw := s.watches.get(key); kw != nil {
			kw.mu.Lock()
			open := slices.ContainsFunc(kw.waiters, func(w *waiter) bool { return w.holder == holder })
			kw.mu.Unlock()
			if open {
				return
			}
		}
		s.leaveInBackground(key, holder, false)
	}
}
