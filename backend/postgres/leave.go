package postgres

import (
	"context"
	"time"
)

// leave takes holder's place out of key's line in the background, and gives back a grant the
// line made it that it has not taken; with a try id, only the place that try took, and a late
// try is kept out. It is bounded by a few seconds; Close waits for it, and so do Inspect of key
// and Release of holder's lease on key.
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
	all, mine := leaveID{key: key, all: true}, leaveID{key: key, holder: holder}
	byKey, byHolder := s.leaving.start(all), s.leaving.start(mine)
	go func() {
		defer s.leaves.Done()
		defer func() {
			s.lmu.Lock()
			s.leaving.end(all, byKey)
			s.leaving.end(mine, byHolder)
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

// leavings are the leaves in flight, counted by key and by key and holder; guarded by
// Store.lmu.
type leavings map[leaveID]*leaving

// leaveID names the leaves of holder on key, or with all, those of every holder on key.
type leaveID struct {
	key, holder string
	all         bool
}

// leaving is the leaves of one key, or of one holder on it, in flight: done is closed when the
// last one ends.
type leaving struct {
	n        int
	awaiting int // callers of await waiting for done
	done     chan struct{}
}

// start counts one more leave of id and returns its count.
func (ls leavings) start(id leaveID) *leaving {
	lv := ls[id]
	if lv == nil {
		lv = &leaving{done: make(chan struct{})}
		ls[id] = lv
	}
	lv.n++
	return lv
}

// end counts a leave of id, counted in lv, as ended.
func (ls leavings) end(id leaveID, lv *leaving) {
	if lv.n--; lv.n == 0 {
		close(lv.done)
		delete(ls, id)
	}
}

// awaitLeaves waits until the leaves of key this Store has sent have ended, or ctx ends, so that
// an Inspect after a waiter's Close does not list it.
func (s *Store) awaitLeaves(ctx context.Context, key string) error {
	return s.await(ctx, leaveID{key: key, all: true})
}

// awaitHolderLeaves waits until the leaves of holder on key this Store has sent have ended, or
// ctx ends, so that a Release sent after them ends a lease a try given up in flight took before
// its leave (the leave keeps out one that arrives after it), and an Acquire sent after them
// keeps the place it takes and the grant the line makes it.
func (s *Store) awaitHolderLeaves(ctx context.Context, key, holder string) error {
	return s.await(ctx, leaveID{key: key, holder: holder})
}

// await waits until the leaves counted under id have ended, or ctx ends.
func (s *Store) await(ctx context.Context, id leaveID) error {
	s.lmu.Lock()
	lv := s.leaving[id]
	if lv != nil {
		lv.awaiting++
	}
	s.lmu.Unlock()
	if lv == nil {
		return nil
	}
	defer func() {
		s.lmu.Lock()
		lv.awaiting--
		s.lmu.Unlock()
	}()
	select {
	case <-lv.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
