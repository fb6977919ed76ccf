package etcd

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keyWatch is a Store's one etcd watch on a key, shared by its waiters and watches there. It
// keeps a copy of the key's records, brought up to date by each event, and after each batch of
// events wakes the waiters the line would now serve, and the watches, when a lease was granted
// or ended.
type keyWatch struct {
	s      *Store
	key    string
	k      keys
	cancel context.CancelFunc

	mu       sync.Mutex
	st       *state
	reliable bool
	waiters  []*waiter
	watches  []*watch
	refs     int
}

// refusal is what a refused try with a Wait saw, kept for its Register: the key's records when
// it decided (nil when not kept: the Store watched the key already, or the Store keeps more
// than maxSeedBytes of them; Register then reads), their estimated size, and the revision its
// place was written at.
type refusal struct {
	st     *state
	size   int
	placed int64
	at     time.Time
}

// The refusals a Store keeps for their Register are bounded: at most maxRefusals, the records
// they keep at most maxSeedBytes together (a line of a thousand places is some 100 KiB), and one
// older than refusalKept goes first when room is needed, among the refusals or the records (a
// Register follows its refusal at once; one that comes later reads the key).
const (
	maxRefusals  = 1024
	maxSeedBytes = 1 << 20
	refusalKept  = 10 * time.Second
)

// placeID names a holder's place on a key (a struct, not a joined string: keys and holders may
// hold any byte).
type placeID struct{ key, holder string }

func refusalID(key, holder string) placeID { return placeID{key, holder} }

// noteRefusal keeps what a refused try with a Wait saw, for its Register.
func (s *Store) noteRefusal(req core.AcquireRequest, st *state, placed int64) {
	id := refusalID(req.Key, req.Holder)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takeRefusalLocked(id)
	if len(s.refused) >= maxRefusals {
		s.dropOldRefusalsLocked()
		for id := range s.refused {
			if len(s.refused) < maxRefusals {
				break
			}
			s.takeRefusalLocked(id)
		}
	}
	r := refusal{placed: placed, at: time.Now()}
	if s.watches[req.Key] == nil {
		// Register starts the key's watch from these records; with a watch, it has no use for them.
		n := st.size()
		if s.seedBytes+n > maxSeedBytes {
			s.dropOldRefusalsLocked()
		}
		if s.seedBytes+n <= maxSeedBytes {
			r.st, r.size = st, n
			s.seedBytes += n
		}
	}
	s.refused[id] = r
}

// dropOldRefusalsLocked drops the refusals kept longer than refusalKept. s.mu must be held.
func (s *Store) dropOldRefusalsLocked() {
	for id, r := range s.refused {
		if time.Since(r.at) > refusalKept {
			s.takeRefusalLocked(id)
		}
	}
}

// takeRefusalLocked removes and returns the refusal kept for id. s.mu must be held.
func (s *Store) takeRefusalLocked(id placeID) (refusal, bool) {
	r, ok := s.refused[id]
	if ok {
		delete(s.refused, id)
		s.seedBytes -= r.size
	}
	return r, ok
}

// leaveWhenWaitEnds leaves the place req's refused try took once req.Wait has passed, unless a
// Waiter of its holder on the key is open then (its Close leaves) or a later try of the holder
// set a new end: a place is held for the Wait, and no longer, even when its caller neither
// registers nor asks again.
func (s *Store) leaveWhenWaitEnds(req core.AcquireRequest) {
	id := refusalID(req.Key, req.Holder)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if t := s.waitEnds[id]; t != nil {
		t.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(req.Wait, func() {
		s.mu.Lock()
		if s.waitEnds[id] != t {
			s.mu.Unlock()
			return
		}
		delete(s.waitEnds, id)
		kw := s.watches[req.Key]
		s.mu.Unlock()
		if kw != nil {
			kw.mu.Lock()
			open := slices.ContainsFunc(kw.waiters, func(w *waiter) bool { return w.holder == req.Holder })
			kw.mu.Unlock()
			if open {
				return
			}
		}
		s.leaveInBackground(req.Key, req.Holder, false)
	})
	s.waitEnds[id] = t
}

// stopWaitEnd forgets the end of holder's Wait on key: its Waiter leaves.
func (s *Store) stopWaitEnd(key, holder string) {
	id := refusalID(key, holder)
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.waitEnds[id]; t != nil {
		t.Stop()
		delete(s.waitEnds, id)
	}
}

// watchKey returns the Store's watch on key, started from seed (the key's records as a refused
// try read them) or, without one, from a read now.
func (s *Store) watchKey(ctx context.Context, key string, seed *state) (*keyWatch, error) {
	k := s.keys(key)
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, core.ErrClosed
		}
		if kw := s.watches[key]; kw != nil {
			kw.refs++
			s.mu.Unlock()
			return kw, nil
		}
		if seed != nil {
			ctx, cancel := context.WithCancel(s.ctx)
			kw := &keyWatch{s: s, key: key, k: k, cancel: cancel, st: seed, reliable: true, refs: 1}
			s.watches[key] = kw
			s.loops.Add(1)
			s.mu.Unlock()
			go kw.run(ctx, seed.rev)
			return kw, nil
		}
		s.mu.Unlock()
		resp, err := s.c.Get(ctx, k.base, clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		if seed, err = k.readState(resp.Header.Revision, resp.Kvs); err != nil {
			return nil, err
		}
	}
}

// release drops one use of kw, and stops it after the last.
func (kw *keyWatch) release() {
	s := kw.s
	s.mu.Lock()
	kw.refs--
	last := kw.refs == 0 && s.watches[kw.key] == kw
	if last {
		delete(s.watches, kw.key)
	}
	s.mu.Unlock()
	if last {
		kw.cancel()
	}
}

// shut stops kw (the Store closed) and wakes everyone on it.
func (kw *keyWatch) shut() {
	kw.cancel()
	kw.wakeAll()
}

// run follows the key's events from after rev until ctx ends. A watch etcd cancels (the revision
// was compacted, or the member lost its leader) is started again from a fresh read of the key,
// and everyone on it is woken to look again.
func (kw *keyWatch) run(ctx context.Context, rev int64) {
	defer kw.s.loops.Done()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range kw.s.c.Watch(wctx, kw.k.base, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if resp.Err() != nil || resp.Canceled {
				break
			}
			kw.apply(resp.Events)
			rev = kw.rev()
			backoff = 50 * time.Millisecond
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		kw.setReliable(false)
		resp, err := kw.s.c.Get(ctx, kw.k.base, clientv3.WithPrefix())
		if err == nil {
			var st *state
			if st, err = kw.k.readState(resp.Header.Revision, resp.Kvs); err == nil {
				kw.mu.Lock()
				kw.st, kw.reliable = st, true
				kw.mu.Unlock()
				rev = st.rev
				kw.wakeAll()
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

func (kw *keyWatch) rev() int64 {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	return kw.st.rev
}

func (kw *keyWatch) setReliable(r bool) {
	kw.mu.Lock()
	changed := kw.reliable != r
	kw.reliable = r
	kw.mu.Unlock()
	if changed {
		kw.wakeAll()
	}
}

// apply brings the copy of the key's records up to date with events, then wakes the waiters the
// line would serve and, if a lease was granted or ended, the watches.
func (kw *keyWatch) apply(events []*clientv3.Event) {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	changed := false
	for _, ev := range events {
		kind, _, ok := kw.k.parse(ev.Kv.Key)
		if !ok {
			continue
		}
		if ev.Type == clientv3.EventTypePut {
			if kw.st.put(kw.k, ev.Kv) != nil {
				continue
			}
			changed = changed || (kind == kindLease && ev.Kv.Version == 1)
		} else {
			kw.st.remove(kw.k, ev.Kv.Key)
			changed = changed || kind == kindLease
		}
		kw.st.rev = max(kw.st.rev, ev.Kv.ModRevision)
	}
	next, _ := kw.st.next()
	for _, w := range kw.waiters {
		if w.due(kw.st, next) {
			w.wake()
		}
	}
	if changed {
		for _, w := range kw.watches {
			w.wake()
		}
	}
}

func (kw *keyWatch) wakeAll() {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	for _, w := range kw.waiters {
		w.wake()
	}
	for _, w := range kw.watches {
		w.wake()
	}
}

func (kw *keyWatch) isReliable() bool {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	return kw.reliable
}

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
	s.mu.Lock()
	ref, known := s.takeRefusalLocked(refusalID(req.Key, req.Holder))
	s.mu.Unlock()
	var seed *state
	if known {
		seed = ref.st
	}
	kw, err := s.watchKey(ctx, req.Key, seed)
	if err != nil {
		return nil, s.fail(ctx, "register", err)
	}
	w := &waiter{kw: kw, holder: req.Holder, c: make(signal, 1)}
	kw.mu.Lock()
	kw.waiters = append(kw.waiters, w)
	if known {
		w.placed = ref.placed
		next, _ := kw.st.next()
		if w.due(kw.st, next) {
			w.wake()
		}
	} else {
		w.wake()
	}
	kw.mu.Unlock()
	return w, nil
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
