package etcd

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// session is the Store's session lease: the etcd lease its places in lines are on, granted on
// first use and after a loss, renewed while it lives.
type session struct {
	mu     sync.Mutex
	closed bool
	id     clientv3.LeaseID // 0 until needed, and after a loss
}

// current returns the session lease, or 0 when there is none.
func (ss *session) current() clientv3.LeaseID {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.id
}

// forget makes the next place go on a new session lease when id, the current one, was found
// ended: by its renewal's end, or by a try before its renewal noticed (the renewal's end still
// wakes the waiters then).
func (ss *session) forget(id clientv3.LeaseID) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.id == id {
		ss.id = 0
	}
}

// close marks the session closed (no lease is granted after) and returns its lease, or 0.
func (ss *session) close() clientv3.LeaseID {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	return ss.id
}

// session returns the Store's session lease, granting it (and starting its renewal) on first use
// and after a loss.
func (s *Store) session(ctx context.Context) (clientv3.LeaseID, error) {
	if id := s.sess.current(); id != 0 {
		return id, nil
	}
	g, err := s.c.Grant(ctx, seconds(s.sessionTTL))
	if err != nil {
		return 0, err
	}
	ss := &s.sess
	ss.mu.Lock()
	if ss.closed || ss.id != 0 {
		id, closed := ss.id, ss.closed
		ss.mu.Unlock()
		s.revoke(g.ID)
		if closed {
			return 0, core.ErrClosed
		}
		return id, nil
	}
	ch, err := s.c.KeepAlive(s.ctx, g.ID)
	if err != nil {
		ss.mu.Unlock()
		s.revoke(g.ID)
		return 0, err
	}
	ss.id = g.ID
	s.loops.Add(1)
	ss.mu.Unlock()
	go s.renewSession(g.ID, ch)
	return g.ID, nil
}

// renewSession drains the renewals of session lease id until they end: the lease expired (the
// process stalled, or etcd was out of reach for its TTL) or the Store closed. Its places are gone
// then, so every waiter and watch is woken to ask again.
func (s *Store) renewSession(id clientv3.LeaseID, ch <-chan *clientv3.LeaseKeepAliveResponse) {
	defer s.loops.Done()
	for range ch {
	}
	s.sess.forget(id)
	for _, kw := range s.watches.all() {
		kw.wakeAll()
	}
}

// seconds is d in whole seconds, rounded up, at least 1: an etcd lease's TTL.
func seconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}
