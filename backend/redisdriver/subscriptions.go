package redisdriver

import (
	"context"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/core"
)

// PubSub is a driver's subscription connection: one per Store, shared by all its waiters. Its
// methods send the command and need not wait for the server's confirmation, which the driver
// reports to Subscriptions.Confirmed. Subscriptions calls them one at a time.
type PubSub interface {
	Subscribe(ctx context.Context, channel string) error
	Unsubscribe(ctx context.Context, channel string) error
}

// Subscriptions is the core.Notifier of a Redis Store. It subscribes to a key's release channel
// while this Store has waiters on the key, and turns what the driver's connection receives into
// wake-ups: a release message wakes as many waiters as it freed permits (core.Waitlist); a
// confirmed subscription wakes the key's waiters, which may have missed a release before it; a
// connection that goes down makes every waiter unreliable (they retry at their retry interval)
// until its subscriptions are confirmed again.
//
// A waiter is Reliable only while its key's subscription is confirmed and the connection is up,
// so a waiter never depends on a message that cannot come. Safe for concurrent use.
type Subscriptions struct {
	layout Layout
	ps     PubSub
	wl     core.Waitlist

	// sendMu orders what is sent on ps; it is never held by the receiving side, which may need
	// mu while a send waits for its reply.
	sendMu sync.Mutex
	sent   map[string]bool // channel → subscribed on ps, as far as sends go; guarded by sendMu

	mu        sync.Mutex
	refs      map[string]int    // channel → enrolled waiters
	keys      map[string]string // channel → resource key
	confirmed map[string]bool
	closed    bool
}

var _ core.Notifier = (*Subscriptions)(nil)

// NewSubscriptions returns the Subscriptions of a Store with layout, sending over ps.
func NewSubscriptions(layout Layout, ps PubSub) *Subscriptions {
	return &Subscriptions{layout: layout, ps: ps, sent: map[string]bool{}, refs: map[string]int{}, keys: map[string]string{}, confirmed: map[string]bool{}}
}

// Register implements core.Notifier. The first waiter on a key sends SUBSCRIBE for its channel;
// until the server confirms it, the waiter is not Reliable.
func (s *Subscriptions) Register(ctx context.Context, key string, permits int) (core.Waiter, error) {
	ch := s.layout.Channel(key)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, core.ErrClosed
	}
	s.refs[ch]++
	s.keys[ch] = key
	s.mu.Unlock()
	if err := s.sync(ctx, ch); err != nil {
		s.leave(ch)
		return nil, fmt.Errorf("subscribe %q: %w", ch, err)
	}
	inner, _ := s.wl.Register(ctx, key, permits)
	return &waiter{Waiter: inner, s: s, ch: ch}, nil
}

// leave drops one waiter's interest in ch and unsubscribes when it was the last.
func (s *Subscriptions) leave(ch string) {
	s.mu.Lock()
	s.refs[ch]--
	last := s.refs[ch] <= 0
	if last {
		delete(s.refs, ch)
		delete(s.keys, ch)
		delete(s.confirmed, ch)
	}
	closed := s.closed
	s.mu.Unlock()
	if last && !closed {
		// Best effort: a failed UNSUBSCRIBE leaves a subscription whose messages are ignored.
		s.sync(context.Background(), ch)
	}
}

// sync brings ch's subscription on ps in line with whether it has waiters.
func (s *Subscriptions) sync(ctx context.Context, ch string) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	want := s.refs[ch] > 0
	s.mu.Unlock()
	if want == s.sent[ch] {
		return nil
	}
	var err error
	if want {
		err = s.ps.Subscribe(ctx, ch)
	} else {
		err = s.ps.Unsubscribe(ctx, ch)
	}
	if err == nil {
		if want {
			s.sent[ch] = true
		} else {
			delete(s.sent, ch)
		}
	}
	return err
}

// Confirmed reports the server's confirmation of a subscription to channel. The key's waiters
// are woken to try again, in case a release came before the subscription did.
func (s *Subscriptions) Confirmed(channel string) {
	s.mu.Lock()
	key, ok := s.keys[channel]
	s.mu.Unlock()
	if !ok {
		return
	}
	// Wake first: a waiter that sees itself Reliable has had its catch-up wake.
	s.wl.SetReliable(true)
	s.wl.Wake(key)
	s.mu.Lock()
	if s.keys[channel] == key {
		s.confirmed[channel] = true
	}
	s.mu.Unlock()
}

// Message reports a release message received on channel.
func (s *Subscriptions) Message(channel, payload string) {
	s.mu.Lock()
	key, ok := s.keys[channel]
	s.mu.Unlock()
	if ok {
		s.wl.Notify(key, ParsePermits(payload))
	}
}

// Down reports that the connection was lost: messages may be missed until every channel is
// confirmed again. Every waiter is woken and falls back to its retry interval.
func (s *Subscriptions) Down() {
	s.mu.Lock()
	clear(s.confirmed)
	s.mu.Unlock()
	s.wl.SetReliable(false)
}

// Channels returns the channels that should be subscribed, for a driver that resubscribes by
// itself after a reconnect.
func (s *Subscriptions) Channels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	chs := make([]string, 0, len(s.refs))
	for ch := range s.refs {
		chs = append(chs, ch)
	}
	return chs
}

// Close wakes every waiter and refuses new ones with core.ErrClosed.
func (s *Subscriptions) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wl.SetReliable(false)
	s.wl.WakeAll()
}

// waiter is a Waitlist waiter that is Reliable only while its channel's subscription is
// confirmed, and that unsubscribes when the last waiter on the channel leaves.
type waiter struct {
	core.Waiter
	s      *Subscriptions
	ch     string
	closed bool // guarded by s.mu
}

func (w *waiter) Reliable() bool {
	w.s.mu.Lock()
	ok := w.s.confirmed[w.ch]
	w.s.mu.Unlock()
	return ok && w.Waiter.Reliable()
}

func (w *waiter) Close(unused bool) {
	w.Waiter.Close(unused)
	w.s.mu.Lock()
	already := w.closed
	w.closed = true
	w.s.mu.Unlock()
	if !already {
		w.s.leave(w.ch)
	}
}
