package postgres

import (
	"context"
	"errors"
	"strings"
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

// leaveLocked is leave, for a caller holding s.lmu. The leave is one waitline.Leave with a budget
// of leaveFor, so that Inspect and the holder's next call wait for all of it.
func (s *Store) leaveLocked(key, holder string, try *int64) {
	var tryArg any
	if try != nil {
		tryArg = *try
	}
	s.leaves.Start(waitline.Leave{Key: key, Holder: holder, Budget: leaveFor, Send: func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, s.n.leave, []byte(key), []byte(holder), tryArg)
		if pe, refused := errors.AsType[*pgconn.PgError](err); refused && !refusedForNow(pe) {
			return nil // sent again, it would be refused alike; a place left behind ends with its wait
		}
		return err
	}})
}

// leaveFor bounds how long a Store goes on trying to leave: a leave waits for a connection of
// the pool, which a busy pool may not give it within one waitline.LeaveBudget.
const leaveFor = 5 * time.Second

// refusedForNow reports whether the database refused a statement, having changed nothing, for a
// reason that may be gone when it is sent again: a serialization failure or a deadlock (class
// 40), a lock or statement timeout, a shortage of resources (53), a connection lost or a server
// shutting down or starting (08, 57P), a standby not taking writes yet.
func refusedForNow(pe *pgconn.PgError) bool {
	switch pe.Code {
	case "55P03", "57014", "25006":
		return true
	}
	switch pe.Code[:min(len(pe.Code), 2)] {
	case "40", "53", "08":
		return true
	}
	return strings.HasPrefix(pe.Code, "57P")
}
