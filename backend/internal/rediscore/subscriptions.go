package rediscore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// subscriptions is the core.Notifier side of a Store. It subscribes to its channel for a key
// (see layout.channel) while this Store has waiters on the key (and for linger after), and turns
// what the driver's connection receives into wake-ups: a message of grants made from the key's
// line wakes the waiters granted, and no others, and remembers each grant so that a caller that
// gave up before enrolling gives it back (grants.go); a confirmed subscription wakes all of the
// key's waiters, which may have missed a grant before it; a connection that goes down makes
// every waiter unreliable (they retry at their retry interval) until its subscriptions are
// confirmed again.
//
// A waiter is Reliable only while its key's subscription is confirmed and the connection is up,
// so a waiter never depends on a message that cannot come. Safe for concurrent use.
type subscriptions struct {
	layout layout
	id     string // the Store's id, which names its channels
	ps     PubSub
	// leave, when set, takes a holder that gave up out of the key's line. It is called with mu
	// held (so that a close that follows owes or waits for every leave decided before it), and
	// must not block or take mu.
	leave func(key, holder string, floor uint64)
	// mark, when set, runs the watch script on a key (see watch.go).
	mark func(key string) error
	bg   sync.WaitGroup // the refreshes of watches running; Add under mu while not closed

	// sendMu orders what is sent on ps; it is never held by the receiving side, which may need
	// mu while a send waits for its reply.
	sendMu sync.Mutex
	sent   map[string]bool // channel → subscribed on ps, as far as sends go; guarded by sendMu

	mu       sync.Mutex
	channels map[string]*channel
	gens     uint64              // confirmations so far, across channels
	tries    map[string]refusal  // channel+"\x00"+holder → a refusal of a holder not yet enrolled
	watches  map[string]*watched // changed channel → the key's watches
	downs    uint64              // Down calls so far: a watch script sent before one marks nothing
	closed   bool
	// taken are the grants this Store's waiters took without a round trip whose leases may still
	// be marked untaken on the server, by channel+"\x00"+holder (see tookLocked).
	taken        map[string]takenGrant
	takenSweepAt int
	timings      timings
}

var _ Listener = (*subscriptions)(nil)

// newSubscriptions returns the subscriptions of the Store with layout l and id, sending over ps.
func newSubscriptions(l layout, id string, ps PubSub) *subscriptions {
	t := timings{linger: linger, reclaim: reclaimAfter, keep: keepGrants}
	if p := testTimings.Load(); p != nil {
		t = *p
	}
	return &subscriptions{layout: l, id: id, ps: ps, sent: map[string]bool{}, channels: map[string]*channel{}, tries: map[string]refusal{},
		watches: map[string]*watched{}, taken: map[string]takenGrant{}, timings: t}
}

// channel returns the channel on which this Store hears of grants on key to its waiters.
func (s *subscriptions) channel(key string) string { return s.layout.channel(key, s.id) }

// register enrolls a waiter for req (core.Notifier.Register). The first waiter on a key sends
// SUBSCRIBE for its channel; until the server confirms it, the waiter is not Reliable. The
// waiter is woken by grants to req.Holder. It starts woken (its caller tries again at once)
// unless the channel's subscription was confirmed, and stayed up, since before the caller's
// refused try was sent, so that no grant for it can have been missed. It fails with
// core.ErrClosed after close, or with the SUBSCRIBE's error.
func (s *subscriptions) register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
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
	if err := s.sync(ctx, name); err != nil {
		w.Close()
		return nil, fmt.Errorf("subscribe %q: %w", name, err)
	}
	return w, nil
}

// Confirmed implements Listener.
func (s *subscriptions) Confirmed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.watches[name]; k != nil {
		s.gens++
		k.gen = s.gens
		k.wakeAll()
		return
	}
	c := s.channels[name]
	if c == nil {
		return
	}
	s.gens++
	c.gen = s.gens
	c.wakeAll()
}

// Message implements Listener. A message this version cannot read wakes all of the key's
// waiters, who will look.
func (s *subscriptions) Message(name, payload string) {
	s.mu.Lock()
	if k := s.watches[name]; k != nil {
		k.wakeAll()
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
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

// Down implements Listener.
func (s *subscriptions) Down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.downs++
	for _, c := range s.channels {
		c.gen = 0
		c.wakeAll()
	}
	for _, k := range s.watches {
		k.gen = 0
		// The server may have lost the key's watch entry (a restart, a failover): the watch is
		// unreliable until a watch script succeeds again, which is run at once (and retried).
		k.marked = false
		if k.refresh != nil {
			k.refresh.Reset(0)
		}
		k.wakeAll()
	}
}

// Channels implements Listener.
func (s *subscriptions) Channels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.channels)+len(s.watches))
	for name := range s.channels {
		names = append(names, name)
	}
	for name := range s.watches {
		names = append(names, name)
	}
	return names
}

// owedLeave is what a closing Store still owes a key's line: a waiter's place, with a lease the
// line granted it above floor, or a grant to a caller that never enrolled, to give back.
type owedLeave struct {
	key, holder string
	floor       uint64
}

// close wakes every waiter, stops lingering subscriptions' timers, refuses new waiters with
// core.ErrClosed, and returns what the Store owes the lines, for it to send before it closes.
func (s *subscriptions) close() []owedLeave {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked()
}

// closeLocked is close with s.mu held.
func (s *subscriptions) closeLocked() []owedLeave {
	if s.closed {
		return nil
	}
	s.closed = true
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
	for _, k := range s.watches {
		for _, t := range []*time.Timer{k.refresh, k.linger} {
			if t != nil {
				t.Stop()
			}
		}
		k.wakeAll()
	}
	return mergeOwed(owed)
}

// mergeOwed returns owed with one leave a key and holder, of the lowest floor: a leave takes the
// holder's place, so that no grant comes to it after, and passes on its untaken grant above the
// floor, as the leaves merged would.
func mergeOwed(owed []owedLeave) []owedLeave {
	slices.SortFunc(owed, func(a, b owedLeave) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.holder, b.holder), cmp.Compare(a.floor, b.floor))
	})
	return slices.CompactFunc(owed, func(a, b owedLeave) bool { return a.key == b.key && a.holder == b.holder })
}
