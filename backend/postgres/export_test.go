package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetTries makes the Store name its tries that wait with next (tests: a try given up in flight).
func (s *Store) SetTries(next func() int64) { s.newTry = next }

// LeaveTry leaves key's line as a try with id try that failed in flight does, and waits for it.
func (s *Store) LeaveTry(key, holder string, try int64) {
	s.leave(key, holder, &try)
	s.leaves.AwaitKey(context.Background(), key)
}

// LeaveTryInBackground leaves key's line as a try with id try that failed in flight does, in
// the background.
func (s *Store) LeaveTryInBackground(key, holder string, try int64) { s.leave(key, holder, &try) }

// Sweep runs the sweep now, whenever the last one ran, and reports whether it ran (it does not
// while another sweep of the Store's tables is under way) and the keys' rows, places and left
// rows it removed.
func (s *Store) Sweep(ctx context.Context) (ran bool, keys, places, tries int, err error) {
	var k, p, tr int32
	if err := s.queryRow(ctx, s.n.sweep, []any{int64(0), sweepBatch}, &ran, &k, &p, &tr); err != nil || !ran {
		return false, 0, 0, 0, err
	}
	if max(k, p, tr) < sweepBatch {
		return true, int(k), int(p), int(tr), nil
	}
	w, err := s.sweep(ctx, 0) // the rest, as a sweep goes on after a full batch
	return true, int(k) + w.Keys, int(p) + w.Places, int(tr) + w.Tries, err
}

// Retryable reports whether setup tries again after err.
func Retryable(err error) bool { return retryable(err) }

// SetupOnce runs setup's transaction once, without its retries, for a Store in schema with
// prefix.
func SetupOnce(ctx context.Context, pool *pgxpool.Pool, schema, prefix string) error {
	return createSchema(ctx, pool, newNames(schema, prefix))
}

// Channel returns the channel the Store's waiters hear of their grants on.
func (s *Store) Channel() string { return s.l.channel }

// Notice returns what the line sends a waiter's Store when it grants holder a lease on key,
// before the grant's fence.
func Notice(key, holder string) string { return noticeOf(key, holder) }

// Pool returns the Store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// AwaitingLeaves returns how many calls wait for the leaves of holder on key this Store sends.
func (s *Store) AwaitingLeaves(key, holder string) int {
	return s.leaves.Awaiting(key, holder)
}
