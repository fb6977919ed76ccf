package etcd

import (
	"context"
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
	shutDown bool // the Store closed: no event comes any more
	waiters  []*waiter
	watches  []*watch
	refs     int
}

// watchSet is the Store's watches on keys, by key.
type watchSet struct {
	mu     sync.Mutex
	closed bool
	byKey  map[string]*keyWatch
}

// get returns the watch on key, or nil.
func (ws *watchSet) get(key string) *keyWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.byKey[key]
}

// all returns every watch.
func (ws *watchSet) all() []*keyWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	kws := make([]*keyWatch, 0, len(ws.byKey))
	for _, kw := range ws.byKey {
		kws = append(kws, kw)
	}
	return kws
}

// close marks the set closed (no watch starts after) and returns and forgets every watch.
func (ws *watchSet) close() []*keyWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	kws := make([]*keyWatch, 0, len(ws.byKey))
	for _, kw := range ws.byKey {
		kws = append(kws, kw)
	}
	clear(ws.byKey)
	return kws
}

// watchKey returns the Store's watch on key, started from seed (the key's records as a refused
// try read them) or, without one, from a read now.
func (s *Store) watchKey(ctx context.Context, key string, seed *state) (*keyWatch, error) {
	k := s.keys(key)
	ws := &s.watches
	for {
		ws.mu.Lock()
		if ws.closed {
			ws.mu.Unlock()
			return nil, core.ErrClosed
		}
		if kw := ws.byKey[key]; kw != nil {
			kw.refs++
			ws.mu.Unlock()
			return kw, nil
		}
		if seed != nil {
			ctx, cancel := context.WithCancel(s.ctx)
			kw := &keyWatch{s: s, key: key, k: k, cancel: cancel, st: seed, reliable: true, refs: 1}
			if ws.byKey == nil {
				ws.byKey = map[string]*keyWatch{}
			}
			ws.byKey[key] = kw
			s.loops.Add(1)
			ws.mu.Unlock()
			go kw.run(ctx, seed.rev)
			return kw, nil
		}
		ws.mu.Unlock()
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
	ws := &kw.s.watches
	ws.mu.Lock()
	kw.refs--
	last := kw.refs == 0 && ws.byKey[kw.key] == kw
	if last {
		delete(ws.byKey, kw.key)
	}
	ws.mu.Unlock()
	if last {
		kw.cancel()
	}
}

// shut stops kw (the Store closed) and wakes everyone on it, and whoever enrolls after.
func (kw *keyWatch) shut() {
	kw.cancel()
	kw.mu.Lock()
	kw.shutDown = true
	kw.mu.Unlock()
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

// seen returns a copy of the key's records as the Store's watch on key last saw them, or nil
// when the Store has no watch on key, or its watch saw nothing there.
func (s *Store) seen(key string) *state {
	kw := s.watches.get(key)
	if kw == nil {
		return nil
	}
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if _, busy := kw.st.limit(); !busy || !kw.reliable {
		return nil
	}
	return kw.st.clone()
}

// seenGrant is a grant of the line that the Store's watch on its key saw, not yet taken.
type seenGrant struct {
	rec               rec // as the line made it: its waiter's refused request
	create            int64
	fence             int64
	lease, delayLease clientv3.LeaseID
	sole              bool  // no other record of the key is on lease
	life              int64 // lease's whole seconds
}

// untaken returns the grant of the line to holder on key that the Store's watch saw, if it saw
// one.
func (s *Store) untaken(key, holder string) (seenGrant, bool) {
	kw := s.watches.get(key)
	if kw == nil {
		return seenGrant{}, false
	}
	kw.mu.Lock()
	defer kw.mu.Unlock()
	e, ok := kw.st.leases[holder]
	if !ok || !e.untaken {
		return seenGrant{}, false
	}
	g := seenGrant{rec: e.rec, create: e.create, fence: e.leaseFence(), lease: e.lease, sole: kw.st.soleOn(e.lease, holder), life: e.life}
	if d, ok := kw.st.delays[holder]; ok {
		g.delayLease = d.lease
	}
	return g, true
}
