package core

import (
	"context"
	"sync"
)

// Waitlist is the in-process half of a Notifier, for drivers to build on: it keeps the waiters of
// each key in arrival order and, when permits are freed, wakes as many of them as the freed
// permits can serve, not all of them. A driver calls Notify when its own release, or a message
// from its backend, reports freed permits.
//
// The zero value is ready to use. A Waitlist is safe for concurrent use.
type Waitlist struct {
	mu   sync.Mutex
	keys map[string]*waitQueue
	down bool // notifications may be missed: waiters are not Reliable
}

type waitQueue struct {
	head, tail *listWaiter
}

type listWaiter struct {
	wl         *Waitlist
	key        string
	permits    int
	ch         chan struct{}
	prev, next *listWaiter
	closed     bool
}

var _ Notifier = (*Waitlist)(nil)

// Register enrolls a waiter for req.Permits on req.Key at the back of the key's line. The waiter
// starts woken, as a release since the caller's refused try may have gone unseen. It never
// fails; ctx is unused.
func (wl *Waitlist) Register(_ context.Context, req AcquireRequest) (Waiter, error) {
	key := req.Key
	w := &listWaiter{wl: wl, key: key, permits: req.Permits, ch: make(chan struct{}, 1)}
	w.ch <- struct{}{}
	wl.mu.Lock()
	if wl.keys == nil {
		wl.keys = make(map[string]*waitQueue)
	}
	q := wl.keys[key]
	if q == nil {
		q = &waitQueue{}
		wl.keys[key] = q
	}
	if q.tail == nil {
		q.head, q.tail = w, w
	} else {
		w.prev = q.tail
		q.tail.next = w
		q.tail = w
	}
	wl.mu.Unlock()
	return w, nil
}

// Notify reports that permits were freed on key. It wakes waiters in arrival order, skipping
// those already woken and not yet served and those asking for more than is left, charging each
// woken waiter's request against the freed permits until none are left. When nobody fits, the
// first waiter not yet woken is woken anyway (other permits may be free too). A waiter that
// does not fit is passed over rather than left to block the line: the store keeps no queue, so
// holding smaller waiters back would leave permits idle without serving the large one sooner.
// Notify does not block.
func (wl *Waitlist) Notify(key string, permits int) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	q := wl.keys[key]
	if q == nil {
		return
	}
	budget := permits
	var first *listWaiter // the first waiter not yet woken, in case none fits
	for w := q.head; w != nil && budget > 0; w = w.next {
		if len(w.ch) > 0 {
			continue // already woken for earlier permits and not yet served
		}
		if first == nil {
			first = w
		}
		if w.permits > budget {
			continue // would be refused; one that fits goes first
		}
		w.ch <- struct{}{}
		budget -= w.permits
	}
	if budget == permits && first != nil {
		// Nobody fits what was freed; other permits may be free, so the head tries anyway.
		first.ch <- struct{}{}
	}
}

// SetReliable says whether notifications can be missed (false, say while a subscription is
// down) or not (true, the zero value's state). A change wakes every waiter, so that each one
// tries again and looks at Reliable: going down, it starts retrying at its retry interval; coming
// back, it makes up for a release it may have missed.
func (wl *Waitlist) SetReliable(reliable bool) {
	wl.mu.Lock()
	changed := wl.down == reliable
	wl.down = !reliable
	wl.mu.Unlock()
	if changed {
		wl.WakeAll()
	}
}

// Wake wakes every waiter on key, for a store that may have missed notifications on it (for
// example until its subscription to the key was confirmed).
func (wl *Waitlist) Wake(key string) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	if q := wl.keys[key]; q != nil {
		q.wakeAll()
	}
}

func (q *waitQueue) wakeAll() {
	for w := q.head; w != nil; w = w.next {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// WakeAll wakes every waiter on every key, for a store that is closing or that may have missed
// notifications.
func (wl *Waitlist) WakeAll() {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	for _, q := range wl.keys {
		q.wakeAll()
	}
}

// Len returns the number of waiters enrolled on key.
func (wl *Waitlist) Len(key string) int {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	n := 0
	if q := wl.keys[key]; q != nil {
		for w := q.head; w != nil; w = w.next {
			n++
		}
	}
	return n
}

func (w *listWaiter) C() <-chan struct{} { return w.ch }

func (w *listWaiter) Reliable() bool {
	w.wl.mu.Lock()
	defer w.wl.mu.Unlock()
	return !w.wl.down
}

func (w *listWaiter) Close(unused bool) {
	wl := w.wl
	wl.mu.Lock()
	if w.closed {
		wl.mu.Unlock()
		return
	}
	w.closed = true
	q := wl.keys[w.key]
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	if q.head == nil {
		delete(wl.keys, w.key)
	}
	wakes := 0
	if unused {
		wakes++
	}
	select {
	case <-w.ch:
		wakes++
	default:
	}
	wl.mu.Unlock()
	if wakes > 0 {
		// Each wake was meant to let this waiter try; it will not, so the next ones should.
		wl.Notify(w.key, wakes*w.permits)
	}
}
