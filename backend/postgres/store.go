package postgres

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
)

// Store is a core.Store on PostgreSQL, and a core.Notifier, core.Watcher and core.FenceRaiser.
// Make one with New. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	n    names
	opts options
	l    *listener

	newTry func() int64 // names a try that waits among every Store's, for leave: rand.Int64

	closed atomic.Bool
	leaves *waitline.Leaves // leaves of the line sent in the background

	lmu    sync.Mutex // orders the leaves Close sends after those of Waiters' Close
	cancel context.CancelFunc
	loops  sync.WaitGroup // the listener's and the renewer's goroutines
}

var (
	_ core.Store       = (*Store)(nil)
	_ core.Notifier    = (*Store)(nil)
	_ core.Watcher     = (*Store)(nil)
	_ core.FenceRaiser = (*Store)(nil)
)

// New returns a Store over pool. Unless WithoutSetup, it first creates the Store's tables and
// functions when there are none (in one transaction), which needs the right to create in the
// schema; tables of another LayoutVersion it refuses with an error wrapping ErrLayoutVersion,
// changing nothing. It then opens the listening connection and waits, up to
// five seconds, for it to be up or to have failed (until it is up, waiters poll). ctx bounds New:
// a database that cannot be reached, or a server that does not answer as PostgreSQL (another
// protocol on the port), fails it once ctx ends, if not before. On failure New returns an error
// saying what failed (reaching the database, the layout's version, or creating the tables) and why, wrapping ctx's error
// when ctx ended, with nothing started; a nil ctx or pool or a bad option is core.ErrInvalid.
// Close stops what the Store started and leaves the pool open.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if ctx == nil {
		return nil, fmt.Errorf("postgres: new: %w: ctx: must not be nil", core.ErrInvalid)
	}
	if pool == nil {
		return nil, fmt.Errorf("postgres: new: %w: pool: must not be nil", core.ErrInvalid)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	n := newNames(o.schema, o.prefix)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("postgres: new store: %w", err)
	}
	if err := watched(ctx, pool, func(ctx context.Context) error { return setup(ctx, pool, n, o.setup) }); err != nil {
		return nil, (&Store{}).fail(ctx, err)
	}
	lc := pool.Config().ConnConfig
	if o.listen != nil {
		lc = o.listen
	}
	lc = lc.Copy()
	if lc.RuntimeParams == nil {
		lc.RuntimeParams = make(map[string]string)
	}
	var id [8]byte
	crand.Read(id[:])
	// Operators see the listening session for what it is (pg_stat_activity.application_name),
	// and the line tells it from a session a pooler kept or gave to another client (see alive
	// in sql/line.sql).
	lc.RuntimeParams["application_name"] = listenerName + " " + hex.EncodeToString(id[:])
	s := &Store{pool: pool, n: n, opts: o, leaves: waitline.NewLeaves(context.Background()), newTry: rand.Int64}
	s.l = newListener(s, lc, o.prefix+hex.EncodeToString(id[:]))
	bg, stop := context.WithCancel(context.Background())
	s.cancel = stop
	s.loops.Add(3)
	go func() {
		defer s.loops.Done()
		s.l.run(bg)
	}()
	go func() {
		defer s.loops.Done()
		s.l.renew(bg)
	}()
	go func() {
		defer s.loops.Done()
		s.sweepEvery(bg)
	}()
	s.l.awaitUp(ctx)
	return s, nil
}

// Close closes the Store: later operations return an error wrapping core.ErrClosed, and every
// waiter and watch is woken to find that out. It first sends the leaves of the line its
// waiters owe (within waitline.CloseWait), then closes the listening connection. Leases are
// not released. The pool stays open. Close is idempotent.
func (s *Store) Close() error {
	s.lmu.Lock() // a leave starts before this, or not at all: see leave
	closed := s.closed.Swap(true)
	if !closed {
		// The places of waiters still open, and of refused tries not yet registered: their
		// callers, woken below, find the Store closed, and their Waiters' Close sends nothing
		// then; a try refused after this leaves its place itself (see acquire). Left here, such a place would hold up
		// the line until the dead-waiter pass finds this Store's listener gone, or, when it
		// was down at the try, until the place's wait ends.
		for _, t := range s.l.queued() {
			s.leaveLocked(t.key, t.holder, nil)
		}
	}
	s.lmu.Unlock()
	if closed {
		return nil
	}
	s.l.wakeAll()
	ctx, cancel := context.WithTimeout(context.Background(), waitline.CloseWait)
	defer cancel()
	s.leaves.Close(ctx)
	s.cancel()
	s.loops.Wait()
	return nil
}

// fail returns err from an operation: core.ErrClosed after Close, ctx's error when ctx ended,
// else err with the driver's name; a failure to reach the database in the words of package
// diagnose (diagnosed).
func (s *Store) fail(ctx context.Context, err error) error {
	err = diagnosed(ctx, s.pool, err)
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("postgres: %w: %w", cerr, err)
	}
	return fmt.Errorf("postgres: %w", err)
}

// check returns the error for an operation that must not start: the Store is closed or ctx
// ended.
func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	return ctx.Err()
}

// queryRow runs sql as one statement and scans its one row into dest, trying again, at most
// twice, when PostgreSQL rolled it back for a serialization failure (a pool whose default
// isolation is repeatable read or serializable) or a deadlock.
func (s *Store) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	for attempt := 0; ; attempt++ {
		err := s.pool.QueryRow(ctx, sql, args...).Scan(dest...)
		var pe *pgconn.PgError
		if err == nil || attempt == 2 || !errors.As(err, &pe) || (pe.Code != "40001" && pe.Code != "40P01") {
			return err
		}
	}
}

// us returns d in microseconds, rounded up so that a TTL of 1ns still lasts.
func us(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// listenerName and, after a space, the Store's id (the last 16 characters of its channel) are
// the application_name of the Store's listening connection.
const listenerName = "leasehold listener"
