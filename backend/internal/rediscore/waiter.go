package rediscore

import (
	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
)

// lineWaiter is the core.Wake of one Register: a holder waiting in a key's line, woken by the
// grants to it heard of on its Store's channel or in its Store's replies. Its fields other than
// c are guarded by s.mu.
type lineWaiter struct {
	s           *subscriptions
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
