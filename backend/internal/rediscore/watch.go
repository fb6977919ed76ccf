package rediscore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
)

const (
	// watchLife is how long, by the server's clock, one watch script makes the scripts publish
	// the key's changes; a Store refreshes it every watchLife/3 while it has watches on the key,
	// so one failed refresh costs nothing but the watches' reliability.
	watchLife = 30 * time.Second
	// watchRetry is how soon a failed refresh is tried again.
	watchRetry = time.Second
	// watchTimeout bounds one refresh.
	watchTimeout = 5 * time.Second
)

// watches are a Store's key watches, over its subscription connection: for each key watched, a
// subscription to the key's changed channel (see layout.changed), and the watch script run
// every watchLife/3 so that the scripts publish the key's changes; a message on the channel, or
// a change of the watches' reliability, wakes the key's watches. Their state is guarded by the
// connection's mu.
type watches struct {
	*conn
	layout layout
	// mark, when set, runs the watch script on a key.
	mark   func(key string) error
	bg     sync.WaitGroup      // the refreshes of watches running; Add under mu while not closed
	byName map[string]*watched // changed channel → the key's watches
	downs  uint64              // Down calls so far: a watch script sent before one marks nothing
}

// newWatches returns the watches of the Store with layout l, over c.
func newWatches(c *conn, l layout) *watches {
	return &watches{conn: c, layout: l, byName: map[string]*watched{}}
}

// watched is what watches keeps for one key's changed channel while the Store watches the key
// (and for linger after). Its fields are guarded by the connection's mu.
type watched struct {
	name, key string
	ws        []*keyWatch
	// gen is nonzero while the subscription is confirmed and the connection up.
	gen uint64
	// marked says the latest watch script on the key succeeded: the scripts publish its changes.
	marked  bool
	refresh *time.Timer // set while ws is not empty
	linger  *time.Timer // set while ws is empty
}

// wakeAll wakes every watch of k.
func (k *watched) wakeAll() {
	for _, w := range k.ws {
		w.wake()
	}
}

// confirmed records that k's subscription was confirmed, the gen-th confirmation, and wakes
// k's watches.
func (k *watched) confirmed(gen uint64) {
	k.gen = gen
	k.wakeAll()
}

// keyWatch is the core.Wake of one Watch call.
type keyWatch struct {
	s      *watches
	k      *watched
	c      chan struct{}
	closed bool // guarded by s.mu
}

var _ core.Wake = (*keyWatch)(nil)

// Watch implements core.Watcher: one watch script call, which makes every script that grants a
// new lease on key, releases one or gives one back PUBLISH on the key's changed channel for the
// next 30 s (refreshed every 10 s, in the background, while the Store has watches on the key),
// and a SUBSCRIBE to that channel on the Store's one subscription connection (not waited for).
// The Wake starts with a value in C, and is Reliable once the server confirms the subscription.
// Keys nobody watches pay nothing: their scripts publish nothing. After Close, or once ctx has
// ended, it fails with core.ErrClosed or ctx's error.
func (s *Store) Watch(ctx context.Context, key string) (core.Wake, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	sub := s.subscriber()
	if sub == nil {
		return nil, core.ErrClosed
	}
	ws := sub.watches
	w, err := ws.watch(key)
	if err != nil {
		return nil, err
	}
	since := ws.downCount()
	if _, err := s.run(ctx, watchScript, key, watchArgs(watchLife)); err != nil {
		w.Close()
		return nil, err
	}
	ws.marked(w.k, true, since)
	if err := ws.syncWatch(ctx, w.k); err != nil {
		w.Close()
		return nil, s.clientError(ctx, time.Time{}, fmt.Errorf("subscribe %q: %w", w.k.name, err))
	}
	return w, nil
}

// mark runs the watch script on key, for a refresh in the background.
func (s *Store) mark(key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), watchTimeout)
	defer cancel()
	_, err := s.run(ctx, watchScript, key, watchArgs(watchLife))
	return err
}

// watch adds a watch on key, which starts with a value in C; the first on the key starts its
// refreshes. It fails with core.ErrClosed after close.
func (s *watches) watch(key string) (*keyWatch, error) {
	name := s.layout.changed(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, core.ErrClosed
	}
	k := s.byName[name]
	if k == nil {
		k = &watched{name: name, key: key}
		s.byName[name] = k
	}
	if k.linger != nil {
		k.linger.Stop()
		k.linger = nil
	}
	if k.refresh == nil {
		k.refresh = time.AfterFunc(watchLife/3, func() { s.refresh(k) })
	}
	w := &keyWatch{s: s, k: k, c: make(chan struct{}, 1)}
	w.wake() // the caller reads the key after Watch: a change before that is in what it reads
	k.ws = append(k.ws, w)
	return w, nil
}

// downCount returns how many times the connection went down so far.
func (s *watches) downCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downs
}

// marked records whether the latest watch script on k's key succeeded, and wakes k's watches
// when that changes their reliability. A success of a script sent before the connection last
// went down (since, from downCount before sending, is behind) marks nothing: it may have reached
// a server that has since lost the key's watch entry, and Down has sent another.
func (s *watches) marked(k *watched, ok bool, since uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok && since != s.downs {
		return
	}
	if k.marked != ok {
		k.marked = ok
		k.wakeAll()
	}
}

// refresh runs the watch script on k's key again, while k has watches, and arms the next.
func (s *watches) refresh(k *watched) {
	s.mu.Lock()
	if s.closed || len(k.ws) == 0 || s.byName[k.name] != k || s.mark == nil {
		s.mu.Unlock()
		return
	}
	s.bg.Add(1) // under mu, before close's Wait
	s.mu.Unlock()
	defer s.bg.Done()
	since := s.downCount()
	err := s.mark(k.key)
	s.marked(k, err == nil, since)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(k.ws) == 0 || s.byName[k.name] != k || since != s.downs {
		return // (after a Down, the refresh it started arms the next)
	}
	next := watchLife / 3
	if err != nil {
		next = watchRetry
	}
	if k.refresh != nil { // the one timer of k's refreshes, whichever Watch armed it
		k.refresh.Reset(next)
	}
}

// expire unsubscribes from k's channel, which has had no watch for linger.
func (s *watches) expire(k *watched) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if len(k.ws) > 0 || s.byName[k.name] != k || s.closed {
		s.mu.Unlock()
		return
	}
	delete(s.byName, k.name)
	s.mu.Unlock()
	s.unsubscribeLocked(k.name)
}

// syncWatch brings the subscription to k's channel on the connection in line with whether the
// key is watched.
func (s *watches) syncWatch(ctx context.Context, k *watched) error {
	return s.sync(ctx, k.name, func() bool { return s.byName[k.name] != nil })
}

// downLocked makes every watch unreliable and wakes it: the connection went down. s.mu must be
// held.
func (s *watches) downLocked() {
	s.downs++
	for _, k := range s.byName {
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

// closeLocked stops every refresh and linger of the watches, and wakes them. s.mu must be held,
// and s.closed just set.
func (s *watches) closeLocked() {
	for _, k := range s.byName {
		for _, t := range []*time.Timer{k.refresh, k.linger} {
			if t != nil {
				t.Stop()
			}
		}
		k.wakeAll()
	}
}

// wake sends on c unless a value is already pending.
func (w *keyWatch) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// C implements core.Wake: it receives when the key's leases may have changed, when the watch's
// reliability changes, and when the Store closes.
func (w *keyWatch) C() <-chan struct{} { return w.c }

// Reliable implements core.Wake: true while the key's changed channel is subscribed and
// confirmed, the connection up, the latest watch script on the key succeeded, and the Store
// open.
func (w *keyWatch) Reliable() bool {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.k.gen != 0 && w.k.marked && !w.s.closed && !w.closed
}

// Close implements core.Wake. The last watch on a key stops its refreshes, so that the scripts
// stop publishing within 30 s, and its subscription lingers, then ends. It sends nothing.
func (w *keyWatch) Close() {
	s, k := w.s, w.k
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	k.ws = slices.DeleteFunc(k.ws, func(x *keyWatch) bool { return x == w })
	if len(k.ws) > 0 || s.closed {
		return
	}
	if k.refresh != nil {
		k.refresh.Stop()
		k.refresh = nil
	}
	if k.linger == nil && s.byName[k.name] == k {
		k.linger = time.AfterFunc(linger, func() { s.expire(k) })
	}
}
