package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/backend/internal/waitline"
)

// leave takes holder's place out of key's line in the background, and gives back a grant the
// line made it that it has not taken; with a try id, only the place that try took, and a late
// try is kept out. It is sent as waitline.Leaves sends it; Close waits for it, and so do Inspect
// of key and the holder's Acquire and Release on key.
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
	s.leaveUntil(key, holder, try, time.Now().Add(leaveFor))
}

// leaveFor bounds how long a Store goes on trying to leave: a leave waits for a connection of
// the pool, which a busy pool may not give it within one waitline.LeaveBudget.
const leaveFor = 5 * time.Second

// leaveUntil is leaveLocked, started again until the deadline until while unanswered.
func (s *Store) leaveUntil(key, holder string, try *int64, until time.Time) {
	var tryArg any
	if try != nil {
		tryArg = *try
	}
	answered := false
	s.leaves.Start(waitline.Leave{Key: key, Holder: holder, Send: func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, s.n.leave, []byte(key), []byte(holder), tryArg)
		if _, refused := errors.AsType[*pgconn.PgError](err); refused {
			err = nil // sent again, it would be refused alike; a place left behind ends with its wait
		}
		answered = err == nil
		return err
	}, After: func() {
		if !answered && time.Now().Before(until) {
			s.leaveUntil(key, holder, try, until)
		}
	}})
}
