package rediscore

import "context"

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
}

// beforeTry reports that holder's try on key, which will wait if refused, is about to be sent. A
// grant to holder is not given back while the try is in flight (the try may be finding it).
// afterTry or endTry must follow.
func (s *subscriptions) beforeTry(key, holder string) try {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[s.channel(key)]
	if c == nil {
		return try{}
	}
	c.inflight[holder]++
	return try{c: c, holder: holder, gen: c.gen}
}

// endTry ends a try that got no answer.
func (s *subscriptions) endTry(t try) {
	if t.c == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.c.inflight[t.holder]--; t.c.inflight[t.holder] <= 0 {
		delete(t.c.inflight, t.holder)
	}
}

// tryOutcome is what a try's reply said.
type tryOutcome struct {
	key, holder string
	granted     bool
	waits       bool   // the request had a wait: a refusal took a place in the line
	fence       uint64 // the grant's fence, or on a refusal the key's last fence then
}

// afterTry records the outcome of a try (t from beforeTry, or the zero try when there was none);
// after a refusal it subscribes to the key's channel if need be. A refusal of a try that waits
// keeps a place in the line, which the waiter must leave if it gives up; a grant takes it out,
// and with it any grant from the line up to its fence (the line's message about a lease the try
// has just found may still be on its way).
func (s *subscriptions) afterTry(ctx context.Context, t try, out tryOutcome) {
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
		s.sync(ctx, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[name]
	if ws := c.waitersOf(out.holder); len(ws) > 0 {
		for _, w := range ws {
			if out.granted {
				w.queued, w.floor = false, max(w.floor, out.fence)
				if w.grant <= w.floor {
					w.grant = 0
				}
			} else {
				w.queued, w.floor = true, out.fence
			}
		}
		return
	}
	if c != nil {
		if out.granted {
			c.setFloor(out.holder, max(c.floors[out.holder].fence, out.fence)) // found by the try: not to be reclaimed
		} else {
			c.setFloor(out.holder, out.fence) // grants made before this refusal are stale
		}
	}
	if out.granted {
		return
	}
	if len(s.tries) >= 4096 {
		clear(s.tries) // callers that gave up before registering; the rest start woken
	}
	s.tries[name+"\x00"+out.holder] = refusal{gen: t.gen, floor: out.fence}
}
