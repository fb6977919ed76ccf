package redisdriver

import (
	"context"
	"fmt"
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

// Subscriptions is the core.Notifier of a Redis Store. It subscribes to a key's wake channel
// while this Store has waiters on the key (and for Linger after), and turns what the driver's
// connection receives into wake-ups: a wake message wakes the waiters it names, and no others; a
// confirmed subscription wakes all of the key's waiters, which may have missed a wake before it;
// a connection that goes down makes every waiter unreliable (they retry at their retry interval)
// until its subscriptions are confirmed again.
//
// A waiter is Reliable only while its key's subscription is confirmed and the connection is up,
// so a waiter never depends on a message that cannot come. Safe for concurrent use.
type Subscriptions struct {
	layout Layout
	ps     PubSub
	// leave, when set, takes a holder that gave up out of the key's line; it must not block.
	leave func(key, holder string)

	// sendMu orders what is sent on ps; it is never held by the receiving side, which may need
	// mu while a send waits for its reply.
	sendMu sync.Mutex
	sent   map[string]bool // channel → subscribed on ps, as far as sends go; guarded by sendMu

	mu       sync.Mutex
	channels map[string]*channel
	gens     uint64            // confirmations so far, across channels
	tries    map[string]uint64 // channel+"\x00"+holder → gen of the channel when a refused try was sent
	closed   bool
}

// channel is what Subscriptions keeps for one key's channel while it is wanted.
type channel struct {
	name, key string
	waiters   map[string]*waiter // holder → waiter
	// gen is nonzero while the subscription is confirmed and the connection up: the number of
	// the confirmation, so that a try can tell whether the subscription stayed up since.
	gen    uint64
	recent []recentWake // wakes of the last ClaimWindow that named no waiter enrolled here
	linger *time.Timer  // set while the channel has no waiters
}

type recentWake struct {
	holder string
	id     int64
	at     time.Time
}

var _ core.Notifier = (*Subscriptions)(nil)

// NewSubscriptions returns the Subscriptions of a Store with layout, sending over ps.
func NewSubscriptions(layout Layout, ps PubSub) *Subscriptions {
	return &Subscriptions{layout: layout, ps: ps, sent: map[string]bool{}, channels: map[string]*channel{}, tries: map[string]uint64{}}
}

// Register implements core.Notifier. The first waiter on a key sends SUBSCRIBE for its channel;
// until the server confirms it, the waiter is not Reliable. The waiter is woken by the wakes
// that name req.Holder. It starts woken (its caller tries again at once) unless the channel's
// subscription was confirmed, and stayed up, since before the caller's refused try was sent,
// so that no wake for it can have been missed.
func (s *Subscriptions) Register(ctx context.Context, req core.AcquireRequest) (core.Waiter, error) {
	name := s.layout.Channel(req.Key)
	w := &waiter{s: s, key: req.Key, holder: req.Holder, c: make(chan struct{}, 1), queued: req.Wait > 0}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, core.ErrClosed
	}
	c := s.channels[name]
	if c == nil {
		c = &channel{name: name, key: req.Key, waiters: map[string]*waiter{}}
		s.channels[name] = c
	}
	if c.linger != nil {
		c.linger.Stop()
		c.linger = nil
	}
	w.ch = c
	c.waiters[req.Holder] = w
	tk := name + "\x00" + req.Holder
	gen, tried := s.tries[tk]
	delete(s.tries, tk)
	if !tried || gen == 0 || gen != c.gen {
		w.wake() // a wake may have come before the subscription did
	}
	for _, r := range c.recent {
		if r.holder == req.Holder && r.id > w.lastWake {
			w.lastWake = r.id
			w.wake()
		}
	}
	s.mu.Unlock()
	if err := s.sync(ctx, name); err != nil {
		w.Close(false)
		return nil, fmt.Errorf("subscribe %q: %w", name, err)
	}
	return w, nil
}

// BeforeTry reports that a try on key that will wait if refused is about to be sent. It returns a
// token for AfterTry.
func (s *Subscriptions) BeforeTry(key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.channels[s.layout.Channel(key)]; c != nil {
		return c.gen
	}
	return 0
}

// AfterTry records the outcome of holder's try on key, sent when BeforeTry returned token: a refusal
// that will wait keeps its place in the line, which the waiter must leave if it gives up; a grant
// takes it out.
func (s *Subscriptions) AfterTry(key, holder string, token uint64, granted bool) {
	name := s.layout.Channel(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.channels[name].waiter(holder); w != nil {
		w.queued = !granted
		return
	}
	if !granted && token != 0 {
		if len(s.tries) >= 4096 {
			clear(s.tries) // callers that gave up before registering; the rest start woken
		}
		s.tries[name+"\x00"+holder] = token
	}
}

func (c *channel) waiter(holder string) *waiter {
	if c == nil {
		return nil
	}
	return c.waiters[holder]
}

// remove drops w; when it was the channel's last waiter, the subscription lingers.
func (s *Subscriptions) remove(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := w.ch
	if c.waiters[w.holder] == w {
		delete(c.waiters, w.holder)
	}
	if len(c.waiters) == 0 && c.linger == nil && !s.closed && s.channels[c.name] == c {
		c.linger = time.AfterFunc(Linger, func() { s.expire(c) })
	}
}

// expire unsubscribes from c's channel, which has had no waiter for Linger.
func (s *Subscriptions) expire(c *channel) {
	s.mu.Lock()
	if len(c.waiters) > 0 || s.channels[c.name] != c || s.closed {
		s.mu.Unlock()
		return
	}
	delete(s.channels, c.name)
	s.mu.Unlock()
	// Best effort: a failed UNSUBSCRIBE leaves a subscription whose messages are ignored.
	s.sync(context.Background(), c.name)
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
	for _, w := range c.waiters {
		w.wake()
	}
}

// Message reports a wake message received on the channel name.
func (s *Subscriptions) Message(name, payload string) {
	wake, err := ParseMessage(payload)
	if err != nil {
		// Not a format this version knows: wake everyone, who will look.
		s.mu.Lock()
		if c := s.channels[name]; c != nil {
			for _, w := range c.waiters {
				w.wake()
			}
		}
		s.mu.Unlock()
		return
	}
	s.Woken(name, wake)
}

// Woken wakes this Store's waiters among those wake names, on the channel name. A wake reported
// twice (by a script's reply and by its message) wakes a waiter once. A wake for a holder not
// enrolled is kept for ClaimWindow, for a waiter about to register.
func (s *Subscriptions) Woken(name string, wake Wake) {
	if len(wake.Holders) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[name]
	if c == nil {
		return
	}
	now := time.Now()
	for _, h := range wake.Holders {
		w := c.waiters[h]
		if w == nil {
			c.remember(recentWake{holder: h, id: wake.ID, at: now})
			continue
		}
		if wake.ID > w.lastWake {
			w.lastWake = wake.ID
			w.wake()
		}
	}
}

// remember keeps r, dropping wakes older than ClaimWindow.
func (c *channel) remember(r recentWake) {
	i := 0
	for i < len(c.recent) && r.at.Sub(c.recent[i].at) > ClaimWindow {
		i++
	}
	c.recent = append(c.recent[i:], r)
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
		for _, w := range c.waiters {
			w.wake()
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

// Close wakes every waiter, stops lingering subscriptions' timers, and refuses new waiters with
// core.ErrClosed.
func (s *Subscriptions) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.channels {
		if c.linger != nil {
			c.linger.Stop()
		}
	}
	s.wakeAllLocked()
}

// waiter is one enrolled holder. Its fields other than c are guarded by s.mu.
type waiter struct {
	s           *Subscriptions
	ch          *channel
	key, holder string
	c           chan struct{}
	lastWake    int64 // the latest wake that woke it
	queued      bool  // it holds a place in the store's line
	closed      bool
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

// Close ends the enrollment. A waiter whose last try was refused leaves the store's line, which
// passes a reservation made for it to the next in line: one script call, in the background.
func (w *waiter) Close(bool) {
	s := w.s
	s.mu.Lock()
	if w.closed {
		s.mu.Unlock()
		return
	}
	w.closed = true
	leave := w.queued && s.leave != nil && !s.closed
	s.mu.Unlock()
	s.remove(w)
	if leave {
		s.leave(w.key, w.holder)
	}
}
