package memory

import (
	"context"
	"slices"

	"github.com/leasehold/leasehold/core"
)

// watch is one caller's watch on a key: it is woken when a lease on the key is granted or
// released, and when the store closes.
type watch struct {
	signal
	s      *Store
	key    string
	closed bool // guarded by s.mu
}

// Watch implements core.Watcher: the watch is woken after every grant of a new lease on key
// (by Acquire or by the line), every Release that ends one, and every untaken grant given back
// from the line. It never blocks, and starts with nothing in C: the store's lock orders the
// registration before any later change. After Close of the store it returns an error wrapping
// core.ErrClosed.
func (s *Store) Watch(_ context.Context, key string) (core.Wake, error) {
	if err := s.lock(context.Background()); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	w := &watch{signal: newSignal(), s: s, key: key}
	s.watches[key] = append(s.watches[key], w)
	return w, nil
}

// changedLocked wakes the watches of key. s.mu must be held.
func (s *Store) changedLocked(key string) {
	for _, w := range s.watches[key] {
		w.wake()
	}
}

// Close implements core.Wake.
func (w *watch) Close() {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	ws := slices.DeleteFunc(s.watches[w.key], func(x *watch) bool { return x == w })
	if len(ws) == 0 {
		delete(s.watches, w.key)
	} else {
		s.watches[w.key] = ws
	}
}
