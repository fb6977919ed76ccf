package etcd

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// background counts the work a Store owes (leaving lines, revoking leases), under a lock rather
// than in a WaitGroup: operations in flight at Close may still add to it while Close waits.
type background struct {
	mu     sync.Mutex
	n      int
	idleCh chan struct{} // closed when n drops to 0, while Close waits for that
}

// start counts one more piece of work, unless ctx (the Store's background context) has ended:
// it reports whether it counted. Checked under the lock, so no work starts once Close has ended
// ctx and found the count at 0.
func (b *background) start(ctx context.Context) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	b.n++
	return true
}

// done counts one piece of work done.
func (b *background) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n--; b.n == 0 && b.idleCh != nil {
		close(b.idleCh)
		b.idleCh = nil
	}
}

// owed reports whether any work runs.
func (b *background) owed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n > 0
}

// idle returns a channel closed once no background work runs.
func (b *background) idle() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if b.idleCh == nil {
		b.idleCh = make(chan struct{})
	}
	return b.idleCh
}

// goBackground runs fn in the background, tracked so that Close waits for it, within 10s. It
// reports whether fn runs: not once the Store's background context has ended (Close, or the
// client's Close), and then its caller undoes what it counted on fn to undo.
func (s *Store) goBackground(fn func(ctx context.Context)) bool {
	return s.goBackgroundFor(10*time.Second, fn)
}

// goBackgroundFor runs fn in the background, as goBackground, with budget d.
func (s *Store) goBackgroundFor(d time.Duration, fn func(ctx context.Context)) bool {
	if !s.bg.start(s.ctx) {
		return false
	}
	go func() {
		defer s.bg.done()
		ctx, cancel := context.WithTimeout(s.ctx, d)
		defer cancel()
		fn(ctx)
	}()
	return true
}

// revoke ends etcd leases that no record is on any more, in the background.
func (s *Store) revoke(ids ...clientv3.LeaseID) {
	var live []clientv3.LeaseID
	for _, id := range ids {
		if id != 0 && id != s.sess.current() {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		return
	}
	s.goBackground(func(ctx context.Context) {
		for _, id := range live {
			s.c.Revoke(ctx, id) // a lease already gone is what we want; other errors leave it to its TTL
		}
	})
}
