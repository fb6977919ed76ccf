package postgres

import (
	"context"
	"crypto/md5"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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
	leaves sync.WaitGroup // leaves of the line sent in the background

	lmu     sync.Mutex
	leaving map[string]*leaving // key → its leaves in flight
	cancel  context.CancelFunc
	loops   sync.WaitGroup // the listener's and the renewer's goroutines
}

var (
	_ core.Store       = (*Store)(nil)
	_ core.Notifier    = (*Store)(nil)
	_ core.Watcher     = (*Store)(nil)
	_ core.FenceRaiser = (*Store)(nil)
)

// Option configures a Store.
type Option func(*options) error

type options struct {
	schema, prefix string
	setup          bool
	listen         *pgx.ConnConfig // nil: the pool's
	setupTimeout   time.Duration
}

func newOptions(opts []Option) (options, error) {
	o := options{schema: "public", prefix: "leasehold_", setup: true, setupTimeout: 30 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

// WithSchema puts the Store's tables and functions in schema (default "public"), which must
// exist: a name of at most 63 bytes without '$' or NUL. PostgreSQL 15 and later let only a schema's owner create in public by default: a role
// without that right names a schema it may create in.
func WithSchema(schema string) Option {
	return func(o *options) error {
		// The name is quoted wherever it is used, but it also appears inside the functions'
		// $$-quoted bodies, which a '$' could end.
		if schema == "" || len(schema) > 63 || strings.ContainsAny(schema, "$\x00") {
			return fmt.Errorf("%w: schema %q: must be 1 to 63 bytes, without '$' or NUL", core.ErrInvalid, schema)
		}
		o.schema = schema
		return nil
	}
}

// WithTablePrefix sets the prefix of the Store's table, function and channel names (default
// "leasehold_"): a lower-case identifier of at most 32 bytes (letters, digits, '_'). Stores
// with different prefixes share nothing.
func WithTablePrefix(prefix string) Option {
	return func(o *options) error {
		if !validPrefix.MatchString(prefix) {
			return fmt.Errorf("%w: table prefix %q: must be a lower-case identifier of at most 32 bytes ([a-z_][a-z0-9_]*)",
				core.ErrInvalid, prefix)
		}
		o.prefix = prefix
		return nil
	}
}

// WithoutSetup makes New create nothing: it only checks that the tables and functions exist at
// this version (made by SchemaSQL's output, say, by a role allowed to create them). The Store
// then needs only to read and write its tables and to run its functions.
func WithoutSetup() Option {
	return func(o *options) error {
		o.setup = false
		return nil
	}
}

// WithListenDSN opens the Store's one listening connection (LISTEN for its waiters' wakes and
// its watches) with dsn instead of the pool's configuration. LISTEN needs a session of its own:
// when the pool reaches the database through a transaction pooler (PgBouncer with
// pool_mode=transaction), give a DSN that reaches the database directly, or through a
// session-mode pool. The operations themselves are single statements and work through either.
func WithListenDSN(dsn string) Option {
	return func(o *options) error {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return fmt.Errorf("%w: listen DSN: %v", core.ErrInvalid, err)
		}
		o.listen = cfg
		return nil
	}
}

// New returns a Store over pool. It creates the Store's tables and functions when they are
// missing or of another version (idempotently; unless WithoutSetup), which needs the right to
// create in the schema; then it opens the listening connection, and waits up to five seconds
// for it to be up or to have failed (until it is up, waiters poll). Close stops what the Store started and leaves the pool
// open.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pool: must not be nil", core.ErrInvalid)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	n := newNames(o.schema, o.prefix)
	ctx, cancel := context.WithTimeout(context.Background(), o.setupTimeout)
	defer cancel()
	if err := setup(ctx, pool, n, o.setup); err != nil {
		return nil, err
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
	// in schema.sql).
	lc.RuntimeParams["application_name"] = listenerName + " " + hex.EncodeToString(id[:])
	s := &Store{pool: pool, n: n, opts: o, leaving: make(map[string]*leaving), newTry: rand.Int64}
	s.l = newListener(s, lc, o.prefix+"w"+hex.EncodeToString(id[:]))
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
// waiters owe (each bounded by a few seconds), then closes the listening connection. Leases are
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
	s.leaves.Wait()
	s.cancel()
	s.loops.Wait()
	return nil
}

// fail returns err from an operation: core.ErrClosed after Close, ctx's error when ctx ended,
// else err with the driver's name.
func (s *Store) fail(ctx context.Context, err error) error {
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

// maxFloor is the highest fence floor the Store takes: PostgreSQL's bigint counter must have
// room for 2^32 grants after it.
const maxFloor = math.MaxInt64 - 1<<32

// Acquire implements core.Store.Acquire in one round trip: the key's row is locked, expired
// leases purged, the line served, and the request granted or, refused, given its place in the
// line when it will wait. A request whose limit is not the key's is refused first with a
// *core.LimitMismatchError, and the statement writes nothing.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	return s.acquire(ctx, req, 0, 0)
}

// AcquireAbove implements core.FenceRaiser: Acquire where a new grant's fence is at least floor.
// A floor above 2^63 − 2^32 − 1 (fences live in a bigint) is core.ErrInvalid, and changes nothing.
func (s *Store) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	return s.acquire(ctx, req, floor, 0)
}

// RaiseFence implements core.FenceRaiser: Acquire where the lease's fence, new or held, is at
// least fence. The same bound as AcquireAbove's applies.
func (s *Store) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	return s.acquire(ctx, req, fence, fence)
}

func (s *Store) acquire(ctx context.Context, req core.AcquireRequest, floor, raise uint64) (core.AcquireResult, error) {
	if m := max(floor, raise); m > maxFloor {
		return core.AcquireResult{}, fmt.Errorf("%w: fence %d: must be at most %d", core.ErrInvalid, m, uint64(maxFloor))
	}
	if err := s.check(ctx); err != nil {
		return core.AcquireResult{}, err
	}
	args := []any{[]byte(req.Key), []byte(req.Holder), req.Permits, req.Limit, us(req.TTL), us(req.Wait),
		[]byte(req.Value), int64(floor), int64(raise), nil, nil, nil, nil}
	var t try
	if req.Wait > 0 {
		t = s.l.beforeTry(req.Key, req.Holder)
		t.id = s.newTry()
		args[9] = t.id
		if t.up {
			args[10], args[11], args[12] = s.l.channel, t.pid, t.started
		}
	}
	var (
		granted bool
		fence   int64
		retry   int64
		msg     *string
	)
	if err := s.queryRow(ctx, s.n.acquire, args, &granted, &fence, &retry, &msg); err != nil {
		if req.Wait > 0 {
			// The try may have taken a place in the line, or may yet: its caller will not be
			// there to take a grant, so leave (and keep the try out should it arrive later).
			s.leave(req.Key, req.Holder, &t.id)
		}
		return core.AcquireResult{}, s.fail(ctx, err)
	}
	if msg != nil {
		var held int
		if _, err := fmt.Sscanf(*msg, "limit %d", &held); err == nil {
			return core.AcquireResult{}, &core.LimitMismatchError{Held: held, Requested: req.Limit}
		}
		return core.AcquireResult{}, fmt.Errorf("%w: %s", core.ErrInvalid, *msg)
	}
	if req.Wait > 0 && s.l.afterTry(t, granted) {
		// Refused after Close, which its caller's Register will find: nobody will close a
		// Waiter for the place this try took, so leave it now.
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.pool.Exec(lctx, s.n.leave, []byte(req.Key), []byte(req.Holder), t.id) //nolint:errcheck // a place left behind ends with its wait
		return core.AcquireResult{}, core.ErrClosed
	}
	if granted {
		return core.AcquireResult{Granted: true, Fence: uint64(fence)}, nil
	}
	return core.AcquireResult{RetryAfter: time.Duration(retry) * time.Microsecond}, nil
}

// Extend implements core.Store.Extend in one round trip.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if err := s.check(ctx); err != nil {
		return core.ExtendResult{}, err
	}
	var (
		ok             bool
		permits, limit *int32
		fence          *int64
		value          []byte
	)
	err := s.queryRow(ctx, s.n.extend, []any{[]byte(req.Key), []byte(req.Holder), us(req.TTL)}, &ok, &permits, &fence, &limit, &value)
	if err != nil {
		return core.ExtendResult{}, s.fail(ctx, err)
	}
	if !ok {
		return core.ExtendResult{}, core.ErrLost
	}
	return core.ExtendResult{Permits: int(*permits), Fence: uint64(*fence), Limit: int(*limit), Value: string(value)}, nil
}

// Release implements core.Store.Release in one round trip; the permits it frees go to the head
// of the line in the same transaction, and each grant is announced to its waiter's Store.
func (s *Store) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if req.Fence > math.MaxInt64 {
		return false, nil // no lease has such a fence
	}
	var ok bool
	if err := s.queryRow(ctx, s.n.release, []any{[]byte(req.Key), []byte(req.Holder), int64(req.Fence)}, &ok); err != nil {
		return false, s.fail(ctx, err)
	}
	return ok, nil
}

// Inspect implements core.Store.Inspect in one round trip, reading one snapshot of the key; its
// Limit is the key's (that of its leases, else of its line), or, for a key nobody holds or waits
// for, that of its last grant while the key's row is kept, else 0. It first waits for the leaves of the key's line this Store's waiters have sent, so that a waiter
// closed before Inspect is not listed.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	if err := s.check(ctx); err != nil {
		return core.Snapshot{}, err
	}
	if err := s.awaitLeaves(ctx, key); err != nil {
		return core.Snapshot{}, err
	}
	rows, err := s.pool.Query(ctx, s.n.inspect, []byte(key))
	if err != nil {
		return core.Snapshot{}, s.fail(ctx, err)
	}
	var snap core.Snapshot
	var (
		kind, limit, permits int32
		holder, value        []byte
		fence, ttl           int64
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &limit, &holder, &permits, &fence, &ttl, &value}, func() error {
		switch kind {
		case 0:
			snap.Limit = int(limit)
			snap.Leases = append(snap.Leases, core.LeaseInfo{Holder: string(holder), Permits: int(permits),
				Fence: uint64(fence), TTL: time.Duration(ttl) * time.Microsecond, Value: string(value)})
		case 1:
			if len(snap.Leases) == 0 && len(snap.Waiters) == 0 {
				snap.Limit = int(limit) // no lease: the line's limit is the key's
			}
			snap.Waiters = append(snap.Waiters, core.WaiterInfo{Holder: string(holder), Permits: int(permits), Value: string(value)})
		case 2:
			if len(snap.Leases) == 0 && len(snap.Waiters) == 0 {
				snap.Limit = int(limit)
			}
		}
		return nil
	})
	if err != nil {
		return core.Snapshot{}, s.fail(ctx, err)
	}
	return snap, nil
}

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

// noticeOf returns what the line sends a waiter's Store when it grants holder a lease on key:
// the hex MD5 of key's length (4 bytes, big-endian), key and holder, as serve computes it.
func noticeOf(key, holder string) string {
	b := make([]byte, 4, 4+len(key)+len(holder))
	binary.BigEndian.PutUint32(b, uint32(len(key)))
	b = append(append(b, key...), holder...)
	return md5hex(b)
}

// md5hex returns the hex MD5 of b, as PostgreSQL's md5(bytea) does.
func md5hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}
