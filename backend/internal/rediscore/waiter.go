package rediscore

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
)

// waiters are a Store's waiters in the keys' lines, over its subscription connection. They
// subscribe to the Store's channel for a key (see layout.channel) while the Store has waiters on
// the key (and for linger after), and turn what the connection hears on it into wake-ups: a
// message of grants made from the key's line wakes the waiters granted, and no others, and
// remembers each grant so that a caller that gave up before enrolling gives it back (grants.go);
// a confirmed subscription wakes all of the key's waiters, which may have missed a grant before
// it; a connection that goes down wakes them all.
//
// A waiter is Reliable only while its key's subscription is confirmed and the connection is up,
// so a waiter never depends on a message that cannot come. Their state is guarded by the
// connection's mu.
type waiters struct {
	*conn
	layout layout
	id     string // the Store's id, which names its channels
	// leave, when set, takes a holder that gave up out of the key's line. It is called with mu
	// held (so that a close that follows owes or waits for every leave decided before it), and
	// must not block or take mu.
	leave    func(key, holder string, floor uint64)
	channels map[string]*channel
	tries    map[string]refusal // channel+"\x00"+holder → a refusal of a holder not yet enrolled
	// taken are the grants this Store's waiters took without a round trip whose leases may still
	// be marked untaken on the server, by channel+"\x00"+holder (see tookLocked).
	taken        map[string]takenGrant
	takenSweepAt int
	timings      timings
}

// newWaiters returns the waiters of the Store with layout l and id, over c.
func newWaiters(c *conn, l layout, id string) *waiters {
	t := timings{linger: linger, reclaim: reclaimAfter, keep: keepGrants}
	if p := testTimings.Load(); p != nil {
		t = *p
	}
	return &waiters{conn: c, layout: l, id: id, channels: map[string]*channel{}, tries: map[string]refusal{},
		taken: map[string]takenGrant{}, timings: t}
}

// channel returns the channel on which this Store hears of grants on key to its waiters.
func (s *waiters) channel(key string) string { return s.layout.channel(key, s.id) }

// syncChannel brings the subscription to the channel name on the connection in line with
// whether the channel is wanted.
func (s *waiters) syncChannel(ctx context.Context, name string) error {
	return s.sync(ctx, name, func() bool { return s.channels[name] != nil })
}

// register enrolls a waiter for req (core.Notifier.Register). The first waiter on a key sends
// SUBSCRIBE for its channel; until the server confirms it, the waiter is not Reliable. The
// waiter is woken by grants to req.Holder. It starts woken (its caller tries again at once)
// unless the channel's subscription was confirmed, and stayed up, since before the caller's
// refused try was sent, so that no grant for it can have been missed. It fails with
// core.ErrClosed after close, or with the SUBSCRIBE's error.
func (s *waiters) register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	name := s.channel(req.Key)
	w := &lineWaiter{s: s, key: req.Key, holder: req.Holder, c: make(chan struct{}, 1)}
	w.Queued = req.Wait > 0
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, core.ErrClosed
	}
	c := s.channelLocked(name, req.Key)
	c.stopLinger()
	w.ch = c
	c.waiters[req.Holder] = append(c.waiters[req.Holder], w)
	tk := name + "\x00" + req.Holder
	r, tried := s.tries[tk]
	delete(s.tries, tk)
	w.Floor, w.Sent = r.floor, r.sent
	if !tried || r.gen == 0 || r.gen != c.gen {
		w.wake() // a grant may have come before the subscription did
	}
	delete(c.floors, req.Holder) // the waiter's own floor governs now
	if tried {
		c.forget(req.Holder, math.MaxUint64, w.granted)
	} else {
		c.forget(req.Holder, math.MaxUint64, nil) // cannot tell fresh from stale: the waiter starts woken and its try finds a grant
	}
	s.mu.Unlock()
	if err := s.syncChannel(ctx, name); err != nil {
		w.Close()
		return nil, fmt.Errorf("subscribe %q: %w", name, err)
	}
	return w, nil
}

// message handles a message on the channel name: the grants it lists. A message this version
// cannot read wakes all of the key's waiters, who will look.
func (s *waiters) message(name, payload string) {
	grants, err := parseMessage(payload)
	if err != nil {
		s.mu.Lock()
		if c := s.channels[name]; c != nil {
			c.wakeAll()
		}
		s.mu.Unlock()
		return
	}
	s.granted(name, grants, fromChannel)
}

// downLocked makes every channel unconfirmed and wakes its waiters: the connection went down.
// s.mu must be held.
func (s *waiters) downLocked() {
	for _, c := range s.channels {
		c.gen = 0
		c.wakeAll()
	}
}

// closeLocked stops lingering subscriptions' timers and the grants' reclaims, wakes every
// waiter, and returns what the Store owes the lines (unmerged). s.mu must be held, and s.closed
// just set.
func (s *waiters) closeLocked() []owedLeave {
	var owed []owedLeave
	for _, c := range s.channels {
		if c.linger != nil {
			c.linger.Stop()
		}
		for _, ws := range c.waiters {
			for _, w := range ws {
				if w.Owes() {
					owed = append(owed, owedLeave{c.key, w.holder, w.Floor})
					break // the holder's place is one, whoever of its waiters owes it
				}
			}
		}
		for _, r := range c.recent {
			// Kept, its reclaim has not decided yet: one whose timer has fired finds the Store
			// closed, and leaves it to this.
			if r.reclaim != nil {
				r.reclaim.Stop()
				if !s.staleLocked(c, r.holder, r.fence) {
					owed = append(owed, owedLeave{c.key, r.holder, r.fence - 1})
				}
			}
		}
	}
	for tk, r := range s.tries {
		name, holder, _ := strings.Cut(tk, "\x00")
		if c := s.channels[name]; c != nil && len(c.waiters[holder]) == 0 {
			owed = append(owed, owedLeave{c.key, holder, r.floor})
		}
	}
	for _, c := range s.channels {
		c.wakeAll()
	}
	return owed
}

// lineWaiter is the core.Wake of one Register: a holder waiting in a key's line, woken by the
// grants to it heard of on its Store's channel or in its Store's replies. Its fields other than
// c are guarded by s.mu.
type lineWaiter struct {
	s           *waiters
	ch          *channel
	key, holder string
	c           chan struct{}
	waitline.Place
	closed bool
}

var _ core.Wake = (*lineWaiter)(nil)

// granted records a grant of fence to the waiter and wakes it, unless it is stale (made before
// the waiter's latest refusal) or already known.
func (w *lineWaiter) granted(fence uint64) {
	if w.Granted(fence) {
		w.wake()
	}
}

// wake sends on c unless a wake is already pending.
func (w *lineWaiter) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// C implements core.Wake: it receives when a grant to the holder comes, when the key's
// subscription is confirmed, when the connection goes down, and when the Store closes.
func (w *lineWaiter) C() <-chan struct{} { return w.c }

// Reliable implements core.Wake: true while the key's subscription is confirmed, the
// connection up, and the Store open.
func (w *lineWaiter) Reliable() bool {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.ch.gen != 0 && !w.s.closed
}

// Close ends the enrollment. A waiter whose latest try was refused, or that was granted a lease
// from the line it has not taken, leaves the line, which passes such a lease on to the next in
// line: one script call, in the background.
func (w *lineWaiter) Close() {
	s := w.s
	s.mu.Lock()
	if w.closed {
		s.mu.Unlock()
		return
	}
	w.closed = true
	// The holder's place is shared by its waiters (one WithHolder id): the last one to go, as
	// decided in the same critical section that removes it, leaves it.
	last := s.removeLocked(w)
	if last && w.Owes() && s.leave != nil && !s.closed {
		// Started before s.mu is let go: a Close of the Store that follows owes only the
		// waiters still enrolled, and waits for the leaves started before it.
		s.leave(w.key, w.holder, w.Floor)
	}
	if last {
		// The line's message about a grant the waiter took may still come: it is stale.
		w.ch.setFloor(w.holder, max(w.Floor, w.Grant))
	}
	s.mu.Unlock()
}
