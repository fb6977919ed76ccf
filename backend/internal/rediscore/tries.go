package rediscore

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
)

// try is a try in flight, from beforeTry to afterTry or endTry.
type try struct {
	c      *channel
	holder string
	gen    uint64 // the channel's confirmation when the try was sent, 0 if none
}

// refusal is what a refused try that will wait tells about later grants: they have a fence
// above floor (the key's last fence then). gen is the channel's confirmation when the try was
// sent, 0 if none.
type refusal struct {
	gen, floor uint64
	sent       waitline.Sent
}

// beforeTry reports that holder's try on key, which will wait if refused, is about to be sent. A
// grant to holder is not given back while the try is in flight (the try may be finding it).
// afterTry or endTry must follow.
func (s *waiters) beforeTry(key, holder string) try {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[s.channel(key)]
	if c == nil {
		return try{}
	}
	c.inflight.Begin(holder)
	return try{c: c, holder: holder, gen: c.gen}
}

// takeGrant hands req's holder, enrolled alone on the key and waiting, the grant the line made it
// since its refused try, without a round trip, as waitline.Place.Take decides: the fence, and
// how long the lease has left at the least. It reports false, and changes nothing, when Take
// refuses, the Store is closed, the holder has several waiters, or a try of the holder is in
// flight. The grant is then taken: closing the waiter does not give it back. The holder's entry
// stays marked untaken on the server until its next Extend or Release, which nothing reads as a
// give-back but this Store's leave, which it no longer sends for it: not when its waiter closes,
// and not when the line's message about it comes late, after the holder's floor is gone (the
// take is recorded, see tookLocked).
func (s *waiters) takeGrant(req core.AcquireRequest) (fence uint64, left time.Duration, ok bool) {
	if !req.Unshared {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[s.channel(req.Key)]
	if c == nil || s.closed || c.inflight.Busy(req.Holder) {
		return 0, 0, false
	}
	ws := c.waiters[req.Holder]
	if len(ws) != 1 || ws[0].closed {
		return 0, 0, false
	}
	if fence, left, ok = ws[0].Take(req, time.Now()); ok {
		s.tookLocked(c.name, req.Holder, fence, req.TTL)
	}
	return fence, left, ok
}

// endTry ends a try that got no answer.
func (s *waiters) endTry(t try) {
	if t.c == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.c.inflight.End(t.holder)
}

// tryOutcome is what a try's reply said.
type tryOutcome struct {
	key, holder string
	granted     bool
	waits       bool   // the request had a wait: a refusal took a place in the line
	fence       uint64 // the grant's fence, or on a refusal the key's last fence then
	sent        waitline.Sent
}

// afterTry records the outcome of a try (t from beforeTry, or the zero try when there was none);
// after a refusal it subscribes to the key's channel if need be. A refusal of a try that waits
// keeps a place in the line, which the waiter must leave if it gives up; a grant takes it out,
// and with it any grant from the line up to its fence (the line's message about a lease the try
// has just found may still be on its way).
func (s *waiters) afterTry(ctx context.Context, t try, out tryOutcome) {
	if t.c != nil {
		defer s.endTry(t)
	}
	if !out.granted && !out.waits {
		return
	}
	name := s.channel(out.key)
	if !out.granted && !s.subscribed(name, out.key) {
		// Subscribe now, not at Register: a grant to a caller that gives up before enrolling
		// must reach this Store, to be given back.
		s.syncChannel(ctx, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[name]
	if ws := c.waitersOf(out.holder); len(ws) > 0 {
		for _, w := range ws {
			if out.granted {
				w.Found(out.fence)
			} else {
				w.Refused(out.fence, out.sent)
			}
		}
		return
	}
	if c != nil {
		if out.granted {
			c.setFloor(out.holder, max(c.floors[out.holder].fence, out.fence)) // found by the try: not to be reclaimed
		} else {
			c.setFloor(out.holder, out.fence) // grants made before this refusal are stale
			if c.linger != nil {
				// Its caller is about to enroll: a grant to it must be heard of here (to wake it,
				// or to give it back should it not enroll), so the subscription lingers on.
				s.lingerLocked(c, s.timings.linger)
			}
		}
	}
	if out.granted {
		return
	}
	if len(s.tries) >= 4096 {
		clear(s.tries) // callers that gave up before registering; the rest start woken
	}
	s.tries[name+"\x00"+out.holder] = refusal{gen: t.gen, floor: out.fence, sent: out.sent}
}
