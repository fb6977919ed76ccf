package postgres

import (
	"context"
	"time"
)

// leave takes holder's place out of key's line in the background, and gives back a grant the
// line made it that it has not taken; with a try id, only the place that try took, and a late
// try is kept out. It is bounded by a few seconds; Close waits for it.
func (s *Store) leave(key, holder string, try *int64) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.closed.Load() {
		return // Close left the places of open Waiters; one a try in flight took is passed over once this Store's listener is gone, or ends with its wait
	}
	s.leaveLocked(key, holder, try)
}

// leaveLocked is leave, for a caller holding s.lmu.
func (s *Store) leaveLocked(key, holder string, try *int64) {
	s.leaves.Add(1)
	lv := s.leaving[key]
	if lv == nil {
		lv = &leaving{done: make(chan struct{})}
		s.leaving[key] = lv
	}
	lv.n++
	go func() {
		defer s.leaves.Done()
		defer func() {
			s.lmu.Lock()
			if lv.n--; lv.n == 0 {
				close(lv.done)
				delete(s.leaving, key)
			}
			s.lmu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var tryArg any
		if try != nil {
			tryArg = *try
		}
		s.pool.Exec(ctx, s.n.leave, []byte(key), []byte(holder), tryArg) //nolint:errcheck // a place left behind ends with its wait
	}()
}

// leaving is the leaves of one key in flight: done is closed when the last one ends.
type leaving struct {
	n    int
	done chan struct{}
}

// awaitLeaves waits until the leaves of key this Store has sent have ended, or ctx ends, so that
// an Inspect after a waiter's Close does not list it.
func (s *Store) awaitLeaves(ctx context.Context, key string) error {
	s.lmu.Lock()
	lv := s.leaving[key]
	s.lmu.Unlock()
	if lv == nil {
		return nil
	}
	select {
	case <-lv.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
