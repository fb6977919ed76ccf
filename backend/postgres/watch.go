package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/leasehold/leasehold/core"
)

// keyWatch is the watches of one key.
type keyWatch struct {
	key     string
	list    []*watch
	renewed bool // the latest marking of the key as watched succeeded
}

func (kw *keyWatch) wakeAll() {
	for _, w := range kw.list {
		w.wake()
	}
}

// watch is one caller's core.Wake.
type watch struct {
	l  *listener
	h  string
	kw *keyWatch
	c  chan struct{}
}

func (w *watch) wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Watch implements core.Watcher. It costs one round trip when the Store does not watch the key
// already, to mark the key watched for 30 s (the Store renews the mark every 10 s while it has
// watches on the key); a key nobody watches costs its operations nothing. The Wake starts with a
// value in C and is Reliable while the listening connection is up and the mark renewed; its Close
// does no I/O. After Close of the Store, or once ctx has ended, Watch fails with core.ErrClosed or
// ctx's error.
func (s *Store) Watch(ctx context.Context, key string) (core.Wake, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	l := s.l
	h := md5hex([]byte(key))
	l.mu.Lock()
	kw := l.watches[h]
	if kw == nil {
		kw = &keyWatch{key: key}
		l.watches[h] = kw
	}
	w := &watch{l: l, h: h, kw: kw, c: make(chan struct{}, 1)}
	kw.list = append(kw.list, w)
	renewed := kw.renewed
	l.mu.Unlock()
	if !renewed {
		if err := s.markWatched(ctx, key); err != nil {
			w.Close()
			return nil, s.fail(ctx, err)
		}
		l.mu.Lock()
		if !kw.renewed {
			kw.renewed = true
			kw.wakeAll()
		}
		l.mu.Unlock()
	}
	w.wake()
	return w, nil
}

func (s *Store) markWatched(ctx context.Context, key string) error {
	_, err := s.pool.Exec(ctx, s.n.watch, []byte(key), us(watchFor))
	return err
}

// renew renews the watched mark of every key the Store watches, every watchRenewal, until ctx
// ends. A key whose renewal fails, or succeeds again, has its watches woken (their reliability
// changed).
func (l *listener) renew(ctx context.Context) {
	t := time.NewTicker(watchRenewal)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		keys := make([]*keyWatch, 0, len(l.watches))
		for _, kw := range l.watches {
			keys = append(keys, kw)
		}
		l.mu.Unlock()
		for _, kw := range keys {
			rctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := l.s.markWatched(rctx, kw.key)
			cancel()
			l.mu.Lock()
			if ok := err == nil; ok != kw.renewed {
				kw.renewed = ok
				kw.wakeAll()
			}
			l.mu.Unlock()
		}
	}
}

// C implements core.Wake.
func (w *watch) C() <-chan struct{} { return w.c }

// Reliable implements core.Wake: true while the listening connection is up and the key's
// latest watched mark was made.
func (w *watch) Reliable() bool {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.up && w.kw.renewed && !w.l.s.closed.Load()
}

// Close implements core.Wake. The key's mark lapses within 30 s once no Store renews it.
func (w *watch) Close() {
	l := w.l
	l.mu.Lock()
	defer l.mu.Unlock()
	w.kw.list = slices.DeleteFunc(w.kw.list, func(x *watch) bool { return x == w })
	if len(w.kw.list) == 0 && l.watches[w.h] == w.kw {
		delete(l.watches, w.h)
	}
}
