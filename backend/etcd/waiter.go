package etcd

import (
	"context"
	"slices"
	"sync"

	"github.com/leasehold/leasehold/core"
)

// signal is a channel of one pending wake.
type signal chan struct{}

func (c signal) wake() {
	select {
	case c <- struct{}{}:
	default:
	}
}

// waiter is a core.Waiter on a keyWatch.
type waiter struct {
	kw     *keyWatch
	holder string
	placed int64 // the revision its place was written at; 0 if not known
	c      signal
	once   sync.Once
}

// due reports whether the waiter should try again on st: the line granted it, or it is the
// head and would be granted (next is the holder the line serves next), or its place is gone (its session ended, or a janitor took it) and it must ask again.
func (w *waiter) due(st *state, next string) bool {
	if e, ok := st.leases[w.holder]; ok {
		return e.untaken
	}
	if next == w.holder {
		return true
	}
	if _, ok := st.place(w.holder); ok {
		return false
	}
	return w.placed != 0 && st.rev >= w.placed
}

// Register implements core.Notifier. It sends nothing to etcd when the refused try it follows
// went through this Store (the Store's watch on the key starts from what that try read, so
// nothing between them is missed); otherwise it reads the key, and the waiter starts woken.
func (s *Store) Register(ctx context.Context, req core.AcquireRequest) (core.Waiter, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	ref, known := s.refusals.take(refusalID(req.Key, req.Holder))
	var seed *state
	if known {
		seed = ref.st
	}
	kw, err := s.watchKey(ctx, req.Key, seed)
	if err != nil {
		return nil, s.fail(ctx, "register", err)
	}
	return kw.enroll(req.Holder, ref, known), nil
}

// enroll adds a waiter of holder to kw, woken at once unless ref, the refusal its holder's try
// was told (known), shows that the line would not serve it on the records kw keeps; always once
// the Store or its client closed (no event comes any more; its next try says so).
func (kw *keyWatch) enroll(holder string, ref refusal, known bool) *waiter {
	w := &waiter{kw: kw, holder: holder, c: make(signal, 1)}
	kw.mu.Lock()
	defer kw.mu.Unlock()
	kw.waiters = append(kw.waiters, w)
	if !known || kw.shutDown || kw.s.ctx.Err() != nil {
		w.wake()
		return w
	}
	w.placed = ref.placed
	if next, _ := kw.st.next(); w.due(kw.st, next) {
		w.wake()
	}
	return w
}

func (w *waiter) wake()              { w.c.wake() }
func (w *waiter) C() <-chan struct{} { return w.c }
func (w *waiter) Reliable() bool     { return w.kw.isReliable() }

// Close implements core.Waiter: the waiter's place leaves the line, and a grant the line made it
// that it has not taken goes to the next, in the background (Close waits for it).
func (w *waiter) Close() {
	w.once.Do(func() {
		kw := w.kw
		kw.mu.Lock()
		kw.waiters = slices.DeleteFunc(kw.waiters, func(x *waiter) bool { return x == w })
		other := slices.ContainsFunc(kw.waiters, func(x *waiter) bool { return x.holder == w.holder })
		kw.mu.Unlock()
		if !other {
			kw.s.stopWaitEnd(kw.key, w.holder)
			kw.s.leaveInBackground(kw.key, w.holder, false)
		}
		kw.release()
	})
}

// watch is a core.Watch on a keyWatch.
type watch struct {
	kw   *keyWatch
	c    signal
	once sync.Once
}

// Watch implements core.Watcher: one read of the key, then etcd's watch of its records, shared
// with the Store's waiters on the key. The watch starts with a value in C.
func (s *Store) Watch(ctx context.Context, key string) (core.Watch, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	kw, err := s.watchKey(ctx, key, nil)
	if err != nil {
		return nil, s.fail(ctx, "watch", err)
	}
	w := &watch{kw: kw, c: make(signal, 1)}
	w.wake()
	kw.mu.Lock()
	kw.watches = append(kw.watches, w)
	kw.mu.Unlock()
	return w, nil
}

func (w *watch) wake()              { w.c.wake() }
func (w *watch) C() <-chan struct{} { return w.c }
func (w *watch) Reliable() bool     { return w.kw.isReliable() }

// Close implements core.Watch.
func (w *watch) Close() {
	w.once.Do(func() {
		kw := w.kw
		kw.mu.Lock()
		kw.watches = slices.DeleteFunc(kw.watches, func(x *watch) bool { return x == w })
		kw.mu.Unlock()
		kw.release()
	})
}
