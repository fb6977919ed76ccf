package rediscore

import (
	"cmp"
	"context"
	"slices"
	"sync"
)

// conn is the Store's one subscription connection as its waiters and its watches share it: what
// has been sent on it, the confirmations heard on it, whether the Store closed, and the one
// mutex that guards those and both sides' bookkeeping.
type conn struct {
	ps PubSub
	// sendMu orders what is sent on ps; it is never held by the receiving side, which may need
	// mu while a send waits for its reply.
	sendMu sync.Mutex
	sent   map[string]bool // channel → subscribed on ps, as far as sends go; guarded by sendMu

	mu     sync.Mutex
	gens   uint64 // confirmations so far, across channels
	closed bool
}

// sync brings name's subscription on ps in line with want, which is called with mu held and
// reports whether the channel is wanted.
func (c *conn) sync(ctx context.Context, name string, want func() bool) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	wanted := want()
	c.mu.Unlock()
	if wanted == c.sent[name] {
		return nil
	}
	var err error
	if wanted {
		err = c.ps.Subscribe(ctx, name)
	} else {
		err = c.ps.Unsubscribe(ctx, name)
	}
	if err == nil {
		if wanted {
			c.sent[name] = true
		} else {
			delete(c.sent, name)
		}
	}
	return err
}

// unsubscribeLocked ends name's subscription on ps, if one was sent. Best effort: a failed
// UNSUBSCRIBE leaves a subscription whose messages are ignored. c.sendMu must be held, c.mu not.
func (c *conn) unsubscribeLocked(name string) {
	if c.sent[name] && c.ps.Unsubscribe(context.Background(), name) == nil {
		delete(c.sent, name)
	}
}

// confirmation counts a confirmation and returns its number. c.mu must be held.
func (c *conn) confirmation() uint64 {
	c.gens++
	return c.gens
}

// subscriber is the core.Notifier and core.Watcher side of a Store: its one subscription
// connection (the Listener), which routes what the connection hears to the side whose channel
// it is, the line's waiters (waiters, waiter.go) or the key watches (watches, watch.go). A
// confirmed subscription wakes all of its key's waiters or watches, which may have missed a
// change before it; a connection that goes down makes every waiter and watch unreliable (they
// retry at their retry interval) until its subscriptions are confirmed again. Safe for
// concurrent use.
type subscriber struct {
	*conn
	lines   *waiters
	watches *watches
}

var _ Listener = (*subscriber)(nil)

// newSubscriber returns the subscriber of the Store with layout l and id, sending over ps.
func newSubscriber(l layout, id string, ps PubSub) *subscriber {
	c := &conn{ps: ps, sent: map[string]bool{}}
	return &subscriber{conn: c, lines: newWaiters(c, l, id), watches: newWatches(c, l)}
}

// Confirmed implements Listener.
func (s *subscriber) Confirmed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.watches.byName[name]; k != nil {
		k.confirmed(s.confirmation())
		return
	}
	if c := s.lines.channels[name]; c != nil {
		c.confirmed(s.confirmation())
	}
}

// Message implements Listener.
func (s *subscriber) Message(name, payload string) {
	s.mu.Lock()
	if k := s.watches.byName[name]; k != nil {
		k.wakeAll()
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.lines.message(name, payload)
}

// Down implements Listener.
func (s *subscriber) Down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines.downLocked()
	s.watches.downLocked()
}

// Channels implements Listener.
func (s *subscriber) Channels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.lines.channels)+len(s.watches.byName))
	for name := range s.lines.channels {
		names = append(names, name)
	}
	for name := range s.watches.byName {
		names = append(names, name)
	}
	return names
}

// close wakes every waiter and watch, stops lingering subscriptions' timers and watches'
// refreshes, refuses new waiters and watches with core.ErrClosed, and returns what the Store
// owes the lines, for it to send before it closes.
func (s *subscriber) close() []owedLeave {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked()
}

// closeLocked is close with s.mu held.
func (s *subscriber) closeLocked() []owedLeave {
	if s.closed {
		return nil
	}
	s.closed = true
	owed := s.lines.closeLocked()
	s.watches.closeLocked()
	return mergeOwed(owed)
}

// owedLeave is what a closing Store still owes a key's line: a waiter's place, with a lease the
// line granted it above floor, or a grant to a caller that never enrolled, to give back.
type owedLeave struct {
	key, holder string
	floor       uint64
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
