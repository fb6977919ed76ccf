package rediscore

import (
	"slices"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
)

// linger is how long a Store stays subscribed to a key's channel after its last waiter on the
// key left, so that the next waiter finds the subscription confirmed: it then waits without a
// SUBSCRIBE, an UNSUBSCRIBE, or a second try to cover the time before the confirmation.
const linger = 30 * time.Second

// channel is what waiters keeps for one key's channel while it is wanted. Its fields are
// guarded by the connection's mu.
type channel struct {
	name, key string
	waiters   map[string][]*lineWaiter // holder → its waiters (several under one WithHolder id)
	// gen is nonzero while the subscription is confirmed and the connection up: the number of
	// the confirmation, so that a try can tell whether the subscription stayed up since.
	gen    uint64
	recent []recentGrant // grants of the last keepGrants for holders not enrolled here
	// keptBy[h] is the number of h's grants in recent, so that a holder with none (nearly every
	// one, when this Store's releases grant other Stores' waiters) is looked up, not searched for.
	keptBy map[string]int
	// floors[h] is, for a holder h not enrolled here, the fence up to which grants to h are
	// stale: taken, found by a try, released, or made before h's latest refusal.
	floors  map[string]floorAt
	sweepAt int // floors swept of the old ones when they reach this many (see setFloor)
	// scans counts the passes that read every floor or every kept grant: what the bookkeeping
	// costs beyond O(1) a call (its tests check that it stays amortized O(1)).
	scans    int
	inflight waitline.Tries // by holder
	linger   *time.Timer    // set while the channel has no waiters
	lingers  uint64         // lingers started or stopped: an expire of an earlier one does nothing
	keep     time.Duration  // keepGrants
}

// waitersOf returns holder's waiters on c (nil for a nil c).
func (c *channel) waitersOf(holder string) []*lineWaiter {
	if c == nil {
		return nil
	}
	return c.waiters[holder]
}

// wakeAll wakes every waiter on c.
func (c *channel) wakeAll() {
	for _, ws := range c.waiters {
		for _, w := range ws {
			w.wake()
		}
	}
}

// confirmed records that c's subscription was confirmed, the gen-th confirmation, and wakes
// its waiters.
func (c *channel) confirmed(gen uint64) {
	c.gen = gen
	c.wakeAll()
}

// channelLocked returns the channel name, of key, making it if need be; a new channel lingers
// until a waiter enrolls. s.mu must be held.
func (s *waiters) channelLocked(name, key string) *channel {
	c := s.channels[name]
	if c == nil {
		c = &channel{name: name, key: key, waiters: map[string][]*lineWaiter{}, floors: map[string]floorAt{},
			keptBy: map[string]int{}, keep: s.timings.keep}
		s.channels[name] = c
		s.lingerLocked(c, s.timings.linger)
	}
	return c
}

// lingerLocked (re)starts c's linger: c's subscription ends after d unless a waiter enrolls
// first. s.mu must be held.
func (s *waiters) lingerLocked(c *channel, d time.Duration) {
	if c.linger != nil {
		c.linger.Stop()
	}
	c.lingers++
	n := c.lingers
	c.linger = time.AfterFunc(d, func() { s.expire(c, n) })
}

// stopLinger stops c's linger: a waiter enrolled.
func (c *channel) stopLinger() {
	if c.linger != nil {
		c.linger.Stop()
		c.linger = nil
	}
	c.lingers++
}

// reclaiming reports whether a grant heard of on c waits for its reclaim.
func (c *channel) reclaiming() bool {
	return slices.ContainsFunc(c.recent, func(r recentGrant) bool { return r.reclaim != nil })
}

// subscribed makes sure the channel name (of key) is wanted, and reports whether it already was.
func (s *waiters) subscribed(name, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true
	}
	_, ok := s.channels[name]
	if !ok {
		s.channelLocked(name, key)
	}
	return ok
}

// removeLocked drops w and reports whether it was its holder's last waiter on the channel; when
// it was the channel's last waiter, the subscription lingers. s.mu must be held.
func (s *waiters) removeLocked(w *lineWaiter) (last bool) {
	c := w.ch
	ws := slices.DeleteFunc(c.waiters[w.holder], func(x *lineWaiter) bool { return x == w })
	if last = len(ws) == 0; last {
		delete(c.waiters, w.holder)
	} else {
		c.waiters[w.holder] = ws
	}
	if len(c.waiters) == 0 && c.linger == nil && !s.closed && s.channels[c.name] == c {
		s.lingerLocked(c, s.timings.linger)
	}
	return last
}

// expire unsubscribes from c's channel, which has had no waiter for linger (n is the linger's
// number). It waits while a try of the key is in flight (its caller may be about to enroll) or
// a grant heard of on the channel waits for its reclaim: unsubscribed, the Store would forget
// that grant, and its holder, who gave up, would keep the key taken until its TTL.
func (s *waiters) expire(c *channel, n uint64) {
	// sendMu first, so that a channel made again meanwhile subscribes after this unsubscribes.
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if n != c.lingers || len(c.waiters) > 0 || s.channels[c.name] != c || s.closed {
		s.mu.Unlock()
		return
	}
	if c.inflight.Any() || c.reclaiming() {
		s.lingerLocked(c, s.timings.reclaim)
		s.mu.Unlock()
		return
	}
	delete(s.channels, c.name)
	c.linger = nil
	s.mu.Unlock()
	s.unsubscribeLocked(c.name)
}
