package redisdriver

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

// PubSub is a driver's subscription connection: one per Store, shared by all its waiters. Its
// methods send the command and need not wait for the server's confirmation, which the driver
// reports to Subscriptions.Confirmed. Subscriptions calls them one at a time.
type PubSub interface {
	Subscribe(ctx context.Context, channel string) error
	Unsubscribe(ctx context.Context, channel string) error
}

// Linger is how long a Store stays subscribed to a key's channel after its last waiter on the
// key left, so that the next waiter finds the subscription confirmed: it then waits without a
// SUBSCRIBE, an UNSUBSCRIBE, or a second try to cover the time before the confirmation.
const Linger = 30 * time.Second

// Subscriptions is the core.Notifier of a Redis Store. It subscribes to its channel for a key
// (see Layout.Channel) while this Store has waiters on the key (and for Linger after), and turns what the driver's
// connection receives into wake-ups: a message of grants made from the key's line wakes the
// waiters granted, and no others, and remembers each grant so that a caller that gave up
// before enrolling gives it back; a confirmed subscription wakes all of the key's waiters, which may have missed a
// grant before it; a connection that goes down makes every waiter unreliable (they retry at
// their retry interval) until its subscriptions are confirmed again.
//
// A waiter is Reliable only while its key's subscription is confirmed and the connection is up,
// so a waiter never depends on a message that cannot come. Safe for concurrent use.
type Subscriptions struct {
	layout Layout
	id     string // the Store's id, which names its channels
	ps     PubSub
	// leave, when set, takes a holder that gave up out of the key's line; it must not block.
	leave func(key, holder string, floor uint64)

	// sendMu orders what is sent on ps; it is never held by the receiving side, which may need
	// mu while a send waits for its reply.
	sendMu sync.Mutex
	sent   map[string]bool // channel → subscribed on ps, as far as sends go; guarded by sendMu

	mu       sync.Mutex
	channels map[string]*channel
	gens     uint64             // confirmations so far, across channels
	tries    map[string]refusal // channel+"\x00"+holder → a refusal of a holder not yet enrolled
	closed   bool
}

// channel is what Subscriptions keeps for one key's channel while it is wanted.
type channel struct {
	name, key string
	waiters   map[string][]*waiter // holder → its waiters (several under one WithHolder id)
	// gen is nonzero while the subscription is confirmed and the connection up: the number of
	// the confirmation, so that a try can tell whether the subscription stayed up since.
	gen    uint64
	recent []recentGrant // grants of the last keepGrants for holders not enrolled here
	// floors[h] is, for a holder h not enrolled here, the fence up to which grants to h are
	// stale: taken, found by a try, released, or made before h's latest refusal.
	floors   map[string]floorAt
	inflight map[string]int // holder → tries in flight
	linger   *time.Timer    // set while the channel has no waiters
}

type floorAt struct {
	fence uint64
	at    time.Time
}

// setFloor records holder's floor, dropping its kept grants at or below it and any floors
// older than keepGrants.
func (c *channel) setFloor(holder string, fence uint64) {
	now := time.Now()
	if len(c.floors) >= 64 {
		for h, f := range c.floors {
			if now.Sub(f.at) > keepGrants {
				delete(c.floors, h)
			}
		}
	}
	c.floors[holder] = floorAt{fence, now}
	c.forget(holder, fence, nil)
}

// refusal is what a refused try that will wait tells about later grants: they have a fence
// above floor (the key's last fence then).
// gen is the channel's confirmation when the try was sent, 0 if none.
type refusal struct {
	gen, floor uint64
}

type recentGrant struct {
	Grant
	at      time.Time
	reclaim *time.Timer // for a grant heard of on this Store's channel: gives it back if unclaimed
}

// keepGrants is how long a grant for a holder not enrolled is kept, for a waiter whose Register
// comes after the message.
const keepGrants = 2 * time.Second

// reclaimAfter is how long a grant on this Store's channel may wait for its holder to enroll (or
// to find it by a try) before the Store gives it back to the line: its caller gave up between
// the refused try and enrolling, and would otherwise keep the lease taken until its TTL.
const reclaimAfter = time.Second

var _ core.Notifier = (*Subscriptions)(nil)

// NewSubscriptions returns the Subscriptions of the Store with layout and id, sending over ps.
func NewSubscriptions(layout Layout, id string, ps PubSub) *Subscriptions {
	return &Subscriptions{layout: layout, id: id, ps: ps, sent: map[string]bool{}, channels: map[string]*channel{}, tries: map[string]refusal{}}
}

// Register implements core.Notifier. The first waiter on a key sends SUBSCRIBE for its channel;
// until the server confirms it, the waiter is not Reliable. The waiter is woken by grants to
// req.Holder. It starts woken (its caller tries again at once) unless the channel's
// subscription was confirmed, and stayed up, since before the caller's refused try was sent,
// so that no grant for it can have been missed.
func (s *Subscriptions) Register(ctx context.Context, req core.AcquireRequest) (core.Waiter, error) {
	name := s.Channel(req.Key)
	w := &waiter{s: s, key: req.Key, holder: req.Holder, c: make(chan struct{}, 1), queued: req.Wait > 0}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, core.ErrClosed
	}
	c := s.channelLocked(name, req.Key)
	if c.linger != nil {
		c.linger.Stop()
		c.linger = nil
	}
	w.ch = c
	c.waiters[req.Holder] = append(c.waiters[req.Holder], w)
	tk := name + "\x00" + req.Holder
	r, tried := s.tries[tk]
	delete(s.tries, tk)
	w.floor = r.floor
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

// Channel returns the channel on which this Store hears of grants on key to its waiters.
func (s *Subscriptions) Channel(key string) string { return s.layout.Channel(key, s.id) }

// Try is a try in flight, from BeforeTry to AfterTry or EndTry.
type Try struct {
	c      *channel
	holder string
	gen    uint64 // the channel's confirmation when the try was sent, 0 if none
}

// BeforeTry reports that holder's try on key, which will wait if refused, is about to be sent. A
// grant to holder is not given back while the try is in flight (the try may be finding it).
// AfterTry or EndTry must follow.
func (s *Subscriptions) BeforeTry(key, holder string) Try {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[s.Channel(key)]
	if c == nil {
		return Try{}
	}
	c.inflight[holder]++
	return Try{c: c, holder: holder, gen: c.gen}
}

// EndTry ends a try that got no answer.
func (s *Subscriptions) EndTry(t Try) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endTryLocked(t)
}

func (s *Subscriptions) endTryLocked(t Try) {
	if t.c == nil {
		return
	}
	if t.c.inflight[t.holder]--; t.c.inflight[t.holder] <= 0 {
		delete(t.c.inflight, t.holder)
	}
}

// AfterTry records the outcome of holder's try on key (t from BeforeTry, or the zero Try when
// there was none); after a refusal it subscribes to the key's channel if need be. fence is the
// grant's fence, or on a refusal the key's last fence then. A refusal of a
// try that waits keeps a place in the line, which the waiter must leave if it gives up; a grant
// takes it out, and with it any grant from the line up to its fence (the line's message about
// a lease the try has just found may still be on its way).
func (s *Subscriptions) AfterTry(ctx context.Context, t Try, key, holder string, granted, waits bool, fence uint64) {
	if t.c != nil {
		defer s.EndTry(t)
	}
	token := t.gen
	if !granted && !waits {
		return
	}
	name := s.Channel(key)
	if !granted && !s.subscribed(name, key) {
		// Subscribe now, not at Register: a grant to a caller that gives up before enrolling
		// must reach this Store, to be given back.
		s.sync(ctx, name)
	}
	last := fence
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[name]
	if ws := c.waitersOf(holder); len(ws) > 0 {
		for _, w := range ws {
			if granted {
				w.queued, w.floor = false, max(w.floor, fence)
				if w.grant <= w.floor {
					w.grant = 0
				}
			} else {
				w.queued, w.floor = true, last
			}
		}
		return
	}
	if c != nil {
		if granted {
			c.setFloor(holder, max(c.floors[holder].fence, fence)) // found by the try: not to be reclaimed
		} else {
			c.setFloor(holder, last) // grants made before this refusal are stale
		}
	}
	if granted {
		return
	}
	if len(s.tries) >= 4096 {
		clear(s.tries) // callers that gave up before registering; the rest start woken
	}
	s.tries[name+"\x00"+holder] = refusal{gen: token, floor: last}
}

// subscribed makes sure the channel name (of key) is wanted, and reports whether it already was.
func (s *Subscriptions) subscribed(name, key string) bool {
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

// Released records that holder released its lease on key through this Store: no grant from the
// line heard of before the holder's next refusal is its to take.
func (s *Subscriptions) Released(key, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[s.Channel(key)]
	if ws := c.waitersOf(holder); len(ws) > 0 {
		for _, w := range ws {
			w.floor, w.grant = math.MaxUint64, 0
		}
	} else if c != nil {
		c.setFloor(holder, math.MaxUint64)
	}
}

// waitersOf returns holder's waiters on c (nil for a nil c).
func (c *channel) waitersOf(holder string) []*waiter {
	if c == nil {
		return nil
	}
	return c.waiters[holder]
}

// channelLocked returns the channel name, of key, making it if need be; a new channel lingers
// until a waiter enrolls. s.mu must be held.
func (s *Subscriptions) channelLocked(name, key string) *channel {
	c := s.channels[name]
	if c == nil {
		c = &channel{name: name, key: key, waiters: map[string][]*waiter{}, floors: map[string]floorAt{}, inflight: map[string]int{}}
		s.channels[name] = c
		c.linger = time.AfterFunc(Linger, func() { s.expire(c) })
	}
	return c
}

// removeLocked drops w and reports whether it was its holder's last waiter on the channel; when
// it was the channel's last waiter, the subscription lingers. s.mu must be held.
func (s *Subscriptions) removeLocked(w *waiter) (last bool) {
	c := w.ch
	ws := slices.DeleteFunc(c.waiters[w.holder], func(x *waiter) bool { return x == w })
	if last = len(ws) == 0; last {
		delete(c.waiters, w.holder)
	} else {
		c.waiters[w.holder] = ws
	}
	if len(c.waiters) == 0 && c.linger == nil && !s.closed && s.channels[c.name] == c {
		c.linger = time.AfterFunc(Linger, func() { s.expire(c) })
	}
	return last
}

// expire unsubscribes from c's channel, which has had no waiter for Linger.
func (s *Subscriptions) expire(c *channel) {
	// sendMu first, so that a channel made again meanwhile subscribes after this unsubscribes.
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if len(c.waiters) > 0 || len(c.inflight) > 0 || s.channels[c.name] != c || s.closed {
		s.mu.Unlock()
		return
	}
	delete(s.channels, c.name)
	for _, r := range c.recent {
		if r.reclaim != nil {
			r.reclaim.Stop()
		}
	}
	s.mu.Unlock()
	// Best effort: a failed UNSUBSCRIBE leaves a subscription whose messages are ignored.
	if s.sent[c.name] && s.ps.Unsubscribe(context.Background(), c.name) == nil {
		delete(s.sent, c.name)
	}
}

// sync brings name's subscription on ps in line with whether it is wanted.
func (s *Subscriptions) sync(ctx context.Context, name string) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	want := s.channels[name] != nil
	s.mu.Unlock()
	if want == s.sent[name] {
		return nil
	}
	var err error
	if want {
		err = s.ps.Subscribe(ctx, name)
	} else {
		err = s.ps.Unsubscribe(ctx, name)
	}
	if err == nil {
		if want {
			s.sent[name] = true
		} else {
			delete(s.sent, name)
		}
	}
	return err
}

// Confirmed reports the server's confirmation of a subscription to name. The key's waiters are
// woken to try again, in case a wake came before the subscription did.
func (s *Subscriptions) Confirmed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[name]
	if c == nil {
		return
	}
	s.gens++
	c.gen = s.gens
	for _, ws := range c.waiters {
		for _, w := range ws {
			w.wake()
		}
	}
}

// Message reports a message received on the channel name: grants made from the line.
func (s *Subscriptions) Message(name, payload string) {
	grants, err := ParseMessage(payload)
	if err != nil {
		// Not a format this version knows: wake everyone, who will look.
		s.mu.Lock()
		if c := s.channels[name]; c != nil {
			for _, ws := range c.waiters {
				for _, w := range ws {
					w.wake()
				}
			}
		}
		s.mu.Unlock()
		return
	}
	s.granted(name, grants, true)
}

// Granted wakes this Store's waiters among those grants (from a script's reply) name, on the
// channel name, and keeps each grant for its waiter's next Acquire. A grant reported twice (by a
// script's reply and by the message) is taken once; a grant for a holder not enrolled is kept for
// a moment, for a waiter about to register.
func (s *Subscriptions) Granted(name string, grants []Grant) { s.granted(name, grants, false) }

// granted is Granted; ours says the grants came on this Store's channel, so that a grant whose
// holder neither enrolls nor finds it by a try within reclaimAfter is given back to the line.
func (s *Subscriptions) granted(name string, grants []Grant, ours bool) {
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
		if ws := c.waiters[g.Holder]; len(ws) > 0 {
			for _, w := range ws {
				w.granted(g.Fence)
			}
			continue
		}
		// Kept even when it looks stale: the holder's refusal may not be recorded yet.
		r := recentGrant{Grant: g, at: now}
		if ours && s.leave != nil {
			r.reclaim = time.AfterFunc(reclaimAfter, func() { s.reclaim(c, g) })
		}
		c.remember(r)
	}
}

// reclaim gives g back to the line if it is still unclaimed.
func (s *Subscriptions) reclaim(c *channel, g Grant) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if c.inflight[g.Holder] > 0 {
		// A try may be finding the grant right now: look again later.
		for i := range c.recent {
			if c.recent[i].Grant == g && c.recent[i].reclaim != nil {
				c.recent[i].reclaim.Reset(reclaimAfter)
			}
		}
		s.mu.Unlock()
		return
	}
	found := false
	c.forget(g.Holder, g.Fence, func(fence uint64) { found = found || fence == g.Fence })
	if f, ok := c.floors[g.Holder]; ok && g.Fence <= f.fence {
		found = false // stale: taken, found by a try, or released
	}
	s.mu.Unlock()
	if found {
		s.leave(c.key, g.Holder, g.Fence-1)
	}
}

// forget drops the kept grants to holder with a fence up to atMost, calling took (if not nil)
// with each, and stops their reclaim timers.
func (c *channel) forget(holder string, atMost uint64, took func(fence uint64)) {
	kept := c.recent[:0]
	for _, r := range c.recent {
		if r.Holder != holder || r.Fence > atMost {
			kept = append(kept, r)
			continue
		}
		if r.reclaim != nil {
			r.reclaim.Stop()
		}
		if took != nil {
			took(r.Fence)
		}
	}
	clear(c.recent[len(kept):])
	c.recent = kept
}

// remember keeps g, dropping grants older than keepGrants (whose reclaim has run).
func (c *channel) remember(g recentGrant) {
	i := 0
	for i < len(c.recent) && g.at.Sub(c.recent[i].at) > keepGrants {
		i++
	}
	c.recent = append(c.recent[i:], g)
}

// Down reports that the connection was lost: messages may be missed until every channel is
// confirmed again. Every waiter is woken and falls back to its retry interval.
func (s *Subscriptions) Down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.channels {
		c.gen = 0
	}
	s.wakeAllLocked()
}

func (s *Subscriptions) wakeAllLocked() {
	for _, c := range s.channels {
		for _, ws := range c.waiters {
			for _, w := range ws {
				w.wake()
			}
		}
	}
}

// Channels returns the channels that should be subscribed, for a driver that resubscribes by
// itself after a reconnect.
func (s *Subscriptions) Channels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.channels))
	for name := range s.channels {
		names = append(names, name)
	}
	return names
}

// Leaving is what a closing Store still owes its keys' lines: a waiter's place, with a lease the
// line granted it above Floor, or a grant to a caller that never enrolled, to give back.
type Leaving struct {
	Key, Holder string
	Floor       uint64
}

// Close wakes every waiter, stops lingering subscriptions' timers, refuses new waiters with
// core.ErrClosed, and returns what the Store owes the lines, for it to send before it closes.
func (s *Subscriptions) Close() []Leaving {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var owed []Leaving
	for _, c := range s.channels {
		if c.linger != nil {
			c.linger.Stop()
		}
		for _, ws := range c.waiters {
			for _, w := range ws {
				if w.queued || w.grant > w.floor {
					owed = append(owed, Leaving{c.key, w.holder, w.floor})
					break // the holder's place is one, whoever of its waiters owes it
				}
			}
		}
		for _, r := range c.recent {
			if r.reclaim != nil && r.reclaim.Stop() {
				if f, ok := c.floors[r.Holder]; !ok || r.Fence > f.fence {
					owed = append(owed, Leaving{c.key, r.Holder, r.Fence - 1})
				}
			}
		}
	}
	for tk, r := range s.tries {
		name, holder, _ := strings.Cut(tk, "\x00")
		if c := s.channels[name]; c != nil && len(c.waiters[holder]) == 0 {
			owed = append(owed, Leaving{c.key, holder, r.floor})
		}
	}
	s.wakeAllLocked()
	return owed
}

// waiter is one enrolled holder. Its fields other than c are guarded by s.mu.
type waiter struct {
	s           *Subscriptions
	ch          *channel
	key, holder string
	c           chan struct{}
	// A grant from the line is the waiter's when its fence is above floor, the key's last fence
	// at the waiter's latest refusal.
	floor  uint64
	grant  uint64 // the fence of a grant not taken yet, if above floor
	queued bool   // its latest try was refused: it has a place in the line
	closed bool
}

// granted records a grant of fence to the waiter and wakes it, unless it is stale (made before
// the waiter's latest refusal) or already known.
func (w *waiter) granted(fence uint64) {
	if fence > w.floor && fence != w.grant {
		w.grant = max(w.grant, fence)
		w.wake()
	}
}

// wake sends on c unless a wake is already pending.
func (w *waiter) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (w *waiter) C() <-chan struct{} { return w.c }

func (w *waiter) Reliable() bool {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.ch.gen != 0 && !w.s.closed
}

// Close ends the enrollment. A waiter whose latest try was refused, or that was granted a lease
// from the line it has not taken, leaves the line, which passes such a lease on to the next in
// line: one script call, in the background.
func (w *waiter) Close() {
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
	leave := last && (w.queued || w.grant > w.floor) && s.leave != nil && !s.closed
	floor := w.floor
	if last {
		// The line's message about a grant the waiter took may still come: it is stale.
		w.ch.setFloor(w.holder, max(w.floor, w.grant))
	}
	s.mu.Unlock()
	if leave {
		s.leave(w.key, w.holder, floor)
	}
}
