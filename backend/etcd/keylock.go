package etcd

import (
	"context"
	"sync"
)

// keyLocks let one of the Store's operations at a time decide and write on a key: the others
// would only fail their transactions against its writes and try again, each a round trip, so
// that many callers of one Store on one key would take turns by failing.
type keyLocks struct {
	mu    sync.Mutex
	byKey map[string]*keyLock
}

// keyLock is the turn on one key, and how many operations hold or wait for it.
type keyLock struct {
	ch   chan struct{}
	refs int
}

// lock takes the turn on key, waiting at most until ctx ends, and returns its unlock.
func (ls *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	ls.mu.Lock()
	l := ls.byKey[key]
	if l == nil {
		if ls.byKey == nil {
			ls.byKey = map[string]*keyLock{}
		}
		l = &keyLock{ch: make(chan struct{}, 1)}
		ls.byKey[key] = l
	}
	l.refs++
	ls.mu.Unlock()
	unref := func() {
		ls.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(ls.byKey, key)
		}
		ls.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; unref() }, nil
	case <-ctx.Done():
		unref()
		return nil, ctx.Err()
	}
}
