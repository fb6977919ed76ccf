package rediscore

import (
	"math"
	"sync/atomic"
	"time"
)

// keepGrants is how long a grant for a holder not enrolled is kept, for a waiter whose Register
// comes after the message.
const keepGrants = 2 * time.Second

// reclaimAfter is how long a grant on this Store's channel may wait for its holder to enroll (or
// to find it by a try) before the Store gives it back to the line: its caller gave up between
// the refused try and enrolling, and would otherwise keep the lease taken until its TTL.
const reclaimAfter = time.Second

// timings are the durations of a Store's grant bookkeeping: linger, reclaimAfter and keepGrants.
type timings struct {
	linger, reclaim, keep time.Duration
}

// testTimings, when set (by the tests), replaces the timings of the Stores made after it.
var testTimings atomic.Pointer[timings]

// testReclaimed, when set (by the tests), is told of each reclaim timer's decision: whether it
// gave the grant back.
var testReclaimed atomic.Pointer[func(key, holder string, fence uint64, given bool)]

// takenGrant is a grant to a holder that a waiter took from what its Store heard, without a
// round trip: its entry stays marked untaken on the server until the lease's first Extend or
// Release, or until it expires, no later than until.
type takenGrant struct {
	fence uint64
	until time.Time
}

// recentGrant is a grant kept for a holder not enrolled when it was heard of.
type recentGrant struct {
	grant
	at      time.Time
	reclaim *time.Timer // for a grant heard of on this Store's channel: gives it back if unclaimed
}

// floorAt is a holder's floor (see channel.floors) and when it was set.
type floorAt struct {
	fence uint64
	at    time.Time
}

// grantSource says where a Store heard of grants.
type grantSource int

const (
	// fromReply: a script's reply, to a call of this Store.
	fromReply grantSource = iota
	// fromChannel: a message on this Store's channel for the key, which only the line publishes
	// to; a grant heard of so whose holder neither enrolls nor finds it by a try within
	// reclaimAfter is given back to the line.
	fromChannel
)

// granted wakes this Store's waiters among grants, on the channel name, and keeps each grant for
// its waiter's next Acquire. A grant reported twice (by a script's reply and by the message) is
// taken once; a grant for a holder not enrolled is kept for a moment, for a waiter about to
// register.
func (s *waiters) granted(name string, grants []grant, from grantSource) {
	if len(grants) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[name]
	if c == nil || s.closed {
		return
	}
	now := time.Now()
	for _, g := range grants {
		if ws := c.waiters[g.holder]; len(ws) > 0 {
			for _, w := range ws {
				w.granted(g.fence)
			}
			continue
		}
		// Kept even when it looks stale: the holder's refusal may not be recorded yet.
		r := recentGrant{grant: g, at: now}
		if from == fromChannel && s.leave != nil {
			r.reclaim = time.AfterFunc(s.timings.reclaim, func() { s.reclaim(c, g) })
		}
		c.remember(r)
	}
}

// released records that holder released its lease on key through this Store: no grant from the
// line heard of before the holder's next refusal is its to take, and no lease of it is left
// marked untaken on the server.
func (s *waiters) released(key, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := s.channel(key)
	if len(s.taken) > 0 {
		delete(s.taken, name+"\x00"+holder)
	}
	c := s.channels[name]
	if ws := c.waitersOf(holder); len(ws) > 0 {
		for _, w := range ws {
			w.Released()
		}
	} else if c != nil {
		c.setFloor(holder, math.MaxUint64)
	}
}

// reclaim gives g back to the line if it is still unclaimed and not stale. The leave is
// started before s.mu is let go: a Close that follows waits for it, and so does the holder's
// next try (waitline.Leaves.AwaitHolder), which, the refusal it enrolls on forgotten here, takes
// no grant without a round trip. A Store closed first owes the grant instead (see close).
func (s *waiters) reclaim(c *channel, g grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if c.inflight.Busy(g.holder) {
		// A try may be finding the grant right now: look again later.
		for i := range c.recent {
			if c.recent[i].grant == g && c.recent[i].reclaim != nil {
				c.recent[i].reclaim.Reset(s.timings.reclaim)
			}
		}
		return
	}
	found := false
	c.forget(g.holder, g.fence, func(fence uint64) { found = found || fence == g.fence })
	given := found && !s.staleLocked(c, g.holder, g.fence)
	if given {
		// The leave takes the holder's place too: a caller that enrolls after all (it was only
		// slow) must start woken and try again, not wait, Reliable, for a grant to a place it
		// no longer has.
		delete(s.tries, c.name+"\x00"+g.holder)
		s.leave(c.key, g.holder, g.fence-1)
	}
	if f := testReclaimed.Load(); f != nil {
		(*f)(c.key, g.holder, g.fence, given)
	}
}

// staleLocked reports whether a grant of fence to holder, heard of on c, is not the line's to
// get back: the holder's floor is at or above it (taken, found by a try, released, or made
// before its latest refusal), or a waiter took it, or a later grant, without a round trip (the
// holder's entry is then marked untaken on the server, and a leave would drop the lease from
// under it). s.mu must be held.
func (s *waiters) staleLocked(c *channel, holder string, fence uint64) bool {
	if f, ok := c.floors[holder]; ok && fence <= f.fence {
		return true
	}
	t, ok := s.taken[c.name+"\x00"+holder]
	return ok && fence <= t.fence
}

// tookLocked records that the waiter of holder on the channel name took the grant of fence
// without a round trip, until the lease's Release through this Store or for ttl, the lease's
// TTL (the server's lease, granted before, expires sooner, within the clocks' drift, for which a
// keepGrants more is kept). Unlike a floor, the record outlives the channel and is not swept
// before it lapses: the line's message about the grant may come late (a busy subscription
// connection, a paused process), and must not have the Store give back a lease its holder
// holds. Once the records have doubled since they were last swept (64 at least), the lapsed
// ones are dropped: O(1) amortized a take. s.mu must be held.
func (s *waiters) tookLocked(name, holder string, fence uint64, ttl time.Duration) {
	now := time.Now()
	if len(s.taken) >= max(s.takenSweepAt, 64) {
		for k, t := range s.taken {
			if !now.Before(t.until) {
				delete(s.taken, k)
			}
		}
		s.takenSweepAt = 2 * len(s.taken)
	}
	s.taken[name+"\x00"+holder] = takenGrant{fence: fence, until: now.Add(ttl + s.timings.keep)}
}

// setFloor records holder's floor, dropping its kept grants at or below it and, once the
// floors have doubled since they were last swept (64 at least), those older than keepGrants: a
// sweep reads every floor, so sweeping at each call would cost each try on a busy key a pass
// over every holder of the last keepGrants; this way a floor costs O(1) amortized, and the
// floors are at most twice those younger than keepGrants at the last sweep, or 64 (not twice
// those of the last keepGrants: a burst's floors stay until the floors reach twice those kept at
// its last sweep, or the channel expires, where a sweep at each call dropped them keepGrants
// after the burst).
func (c *channel) setFloor(holder string, fence uint64) {
	now := time.Now()
	if len(c.floors) >= max(c.sweepAt, 64) {
		for h, f := range c.floors {
			if now.Sub(f.at) > c.keep {
				delete(c.floors, h)
			}
		}
		c.scans++
		c.sweepAt = 2 * len(c.floors)
	}
	c.floors[holder] = floorAt{fence, now}
	c.forget(holder, fence, nil)
}

// forget drops the kept grants to holder with a fence up to atMost, calling took (if not nil)
// with each, and stops their reclaim timers. It costs a map lookup when holder has none kept,
// and a pass over the grants kept when it has.
func (c *channel) forget(holder string, atMost uint64, took func(fence uint64)) {
	if c.keptBy[holder] == 0 {
		return
	}
	c.scans++
	kept := c.recent[:0]
	for _, r := range c.recent {
		if r.holder != holder || r.fence > atMost {
			kept = append(kept, r)
			continue
		}
		c.unkeep(holder)
		if r.reclaim != nil {
			r.reclaim.Stop()
		}
		if took != nil {
			took(r.fence)
		}
	}
	clear(c.recent[len(kept):])
	c.recent = kept
}

// remember keeps g, dropping grants older than keepGrants (whose reclaim has run).
func (c *channel) remember(g recentGrant) {
	i := 0
	for i < len(c.recent) && g.at.Sub(c.recent[i].at) > c.keep {
		c.unkeep(c.recent[i].holder)
		i++
	}
	clear(c.recent[:i])
	c.recent = append(c.recent[i:], g)
	c.keptBy[g.holder]++
}

// unkeep counts one grant to holder out of recent.
func (c *channel) unkeep(holder string) {
	if c.keptBy[holder]--; c.keptBy[holder] <= 0 {
		delete(c.keptBy, holder)
	}
}
