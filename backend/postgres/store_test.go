package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// counter is a pgx.QueryTracer that counts the statements a pool sends, but for the Store's
// sweeps (its housekeeping, about one a minute among all Stores, not an operation's).
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "sweep\"(") {
		c.n.Add(1)
	}
	return ctx
}

func (*counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedStore returns a Store whose pool counts the statements it sends.
func countedStore(t *testing.T, url string) (*postgres.Store, *counter) {
	t.Helper()
	c := &counter{}
	return storeOn(t, poolConfig(t, url, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = c })), c
}

// TestOneStatementPerOperation: Acquire, Extend, Release and Inspect are one statement each (one
// round trip, once pgx has prepared it), whether the line is empty or not.
func TestOneStatementPerOperation(t *testing.T) {
	s, c := countedStore(t, serverURL(t))
	ctx, key := context.Background(), uniqueKey(t)
	req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	ops := []struct {
		name string
		do   func() error
	}{
		{"Acquire", func() error { _, err := s.Acquire(ctx, req); return err }},
		{"Extend", func() error {
			_, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "a", TTL: time.Minute})
			return err
		}},
		{"Acquire refused, waiting", func() error {
			_, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
			return err
		}},
		{"Inspect", func() error { _, err := s.Inspect(ctx, key); return err }},
		{"Release, granting the line", func() error { _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); return err }},
	}
	for _, op := range ops {
		before := c.n.Load()
		if err := op.do(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if n := c.n.Load() - before; n != 1 {
			t.Errorf("%s sent %d statements, want 1", op.name, n)
		}
	}
}

// TestIdleWaitersSendNothing: eight waiters, each with a Store of its own and a retry interval of
// a second, wait behind a holder of a long lease; while they wait, none of their Stores sends a
// statement (the listening connection has sent its LISTEN before). Then the holder releases and
// each in turn is granted.
func TestIdleWaitersSendNothing(t *testing.T) {
	url, key := serverURL(t), uniqueKey(t)
	holder, _ := primitives.NewMutex(newStore(t, url), key, primitives.WithTTL(time.Minute))
	ctx := context.Background()
	l, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var counters []*counter
	got := make(chan core.Lease, n)
	for range n {
		s, c := countedStore(t, url)
		counters = append(counters, c)
		m, _ := primitives.NewMutex(s, key, primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Second))
		go func() {
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	inspector := newStore(t, url)
	waitFor(t, "every waiter in line", func() bool {
		snap, err := inspector.Inspect(ctx, key)
		return err == nil && len(snap.Waiters) == n
	})
	sent := func() (total int64) {
		for _, c := range counters {
			total += c.n.Load()
		}
		return total
	}
	before := sent()
	// A window of three retry intervals: a waiter that polled would have sent at least 24.
	window := time.NewTimer(3 * time.Second)
	<-window.C
	if d := sent() - before; d != 0 {
		t.Errorf("idle waiters sent %d statements in 3s, want 0", d)
	}
	l.Release(ctx)
	for range n {
		select {
		case l := <-got:
			if l != nil {
				l.Release(ctx)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not granted the lock after the one before released it")
		}
	}
}

// TestListenerReconnects: the listening backend is terminated; waiters see their wakes become
// unreliable, then reliable again once the Store has listened anew, and a release after that
// still hands the lock over at once (a retry interval of an hour rules out polling).
func TestListenerReconnects(t *testing.T) {
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	admin := newPool(t, url)
	holder, _ := primitives.NewMutex(newStore(t, url), key, primitives.WithTTL(time.Minute))
	l, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws := newStore(t, url)
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	w := enroll(t, ws, req)
	if !w.Reliable() {
		t.Fatal("a waiter of a Store that listens is not reliable")
	}
	var terminated int
	if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'leasehold listener %'").Scan(&terminated); err != nil || terminated == 0 {
		t.Fatalf("terminate the listeners: %d, %v", terminated, err)
	}
	waitFor(t, "the waiter to be told its wakes are unreliable", func() bool { return !w.Reliable() })
	waitFor(t, "the Store to listen again", w.Reliable)
	// Woken on each change of reliability, the waiter tries again: its place now names the
	// new listening connection.
	drain(w.C())
	if res, err := ws.Acquire(ctx, req); err != nil || res.Granted {
		t.Fatalf("the waiter's try after the reconnection: %+v, %v; want refused", res, err)
	}
	l.Release(ctx)
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the release after the reconnection did not wake the waiter")
	}
	if res, err := ws.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("the woken waiter's try: %+v, %v; want granted", res, err)
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestHostileInput: keys, holders and values of any bytes — SQL metacharacters, NUL, invalid
// UTF-8, a key of a megabyte — travel only as bind parameters and come back as they went; keys
// that differ in one byte are independent.
func TestHostileInput(t *testing.T) {
	s := newStore(t, serverURL(t))
	ctx := context.Background()
	odd := []string{
		"'; DROP TABLE leasehold_keys; --", `"quoted" \ backslash`, "$1 $$ $body$", "\x00", "a\x00b", "\xff\xfe invalid",
		"%s %d {k}", "ключ 鍵", strings.Repeat("k", 1<<20),
	}
	for i, key := range odd {
		holder, value := odd[(i+1)%len(odd)], odd[(i+2)%len(odd)]
		if len(value) > core.MaxValueLen {
			value = value[:core.MaxValueLen]
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Value: value})
		if err != nil || !res.Granted {
			t.Fatalf("key #%d: Acquire: %+v, %v", i, res, err)
		}
		snap, err := s.Inspect(ctx, key)
		if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != holder || snap.Leases[0].Value != value {
			t.Fatalf("key #%d: Inspect: %v; want one lease of the holder with the value, as given", i, err)
		}
		if ext, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: holder, TTL: time.Minute}); err != nil || ext.Value != value {
			t.Fatalf("key #%d: Extend: %v, value kept: %v", i, err, ext.Value == value)
		}
		// The same key with one more byte is another key: free.
		if res, err := s.Acquire(ctx, core.AcquireRequest{Key: key + "\x00", Holder: "other", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
			t.Fatalf("key #%d plus a NUL: %+v, %v; want granted", i, res, err)
		}
		if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder, Fence: res.Fence}); err != nil || !ok {
			t.Fatalf("key #%d: Release: %v, %v", i, ok, err)
		}
	}
}

func TestNewArguments(t *testing.T) {
	if _, err := postgres.New(nil); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("New(nil): %v, want ErrInvalid", err)
	}
	pool := newPool(t, serverURL(t))
	for _, opt := range []postgres.Option{postgres.WithTablePrefix("Bad-Prefix"), postgres.WithTablePrefix(strings.Repeat("p", 33)),
		postgres.WithSchema(""), postgres.WithSchema("a$$b"), postgres.WithListenDSN("postgres://%zz")} {
		if _, err := postgres.New(pool, opt); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("New with a bad option: %v, want ErrInvalid", err)
		}
	}
}

// TestSetupOptions: a Store in a schema of its own with a prefix of its own shares nothing with
// the default one; WithoutSetup refuses tables that are not there, naming SchemaSQL, and takes
// them once SchemaSQL's output has run; Stores starting together on a new prefix all start.
func TestSetupOptions(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema := "s" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	opts := []postgres.Option{postgres.WithSchema(schema), postgres.WithTablePrefix("locks_")}
	if _, err := postgres.New(pool, append(opts, postgres.WithoutSetup())...); err == nil || !strings.Contains(err.Error(), "SchemaSQL") {
		t.Errorf("WithoutSetup on an empty schema: %v, want an error naming SchemaSQL", err)
	}
	ddl, err := postgres.SchemaSQL(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatalf("SchemaSQL's output: %v", err)
	}
	own, err := postgres.New(pool, append(opts, postgres.WithoutSetup())...)
	if err != nil {
		t.Fatalf("WithoutSetup after SchemaSQL: %v", err)
	}
	defer own.Close()
	def := newStore(t, url)
	req := core.AcquireRequest{Key: uniqueKey(t), Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	for _, s := range []*postgres.Store{own, def} {
		if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
			t.Fatalf("Acquire: %+v, %v: the stores share a key", res, err)
		}
	}
	// Stores starting together on a prefix nobody has set up yet.
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			s, err := postgres.New(pool, postgres.WithSchema(schema), postgres.WithTablePrefix("fresh_"))
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Errorf("a Store starting beside others: %v", err)
		}
	}
}

// TestCloseEndsEverything: after Close, operations fail with ErrClosed, waiters and watches are
// woken, their places are gone from the line, and the pool is still open.
func TestCloseEndsEverything(t *testing.T) {
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	pool := newPool(t, url)
	s, err := postgres.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	other := newStore(t, url)
	if _, err := other.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if _, err := s.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	w, _ := s.Register(ctx, req)
	drain(w.C())
	wt, err := s.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	drain(wt.C())
	w.Close() // the leave goes in the background; Close waits for it
	s.Close()
	s.Close()
	if _, err := s.Acquire(ctx, req); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	select {
	case <-wt.C():
	default:
		t.Error("Close did not wake the watch")
	}
	if wt.Reliable() {
		t.Error("a watch of a closed Store says it is reliable")
	}
	wt.Close()
	if snap, err := other.Inspect(ctx, key); err != nil || len(snap.Waiters) != 0 {
		t.Errorf("after Close: waiters %v, %v; want the closed waiter's place gone", snap.Waiters, err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Errorf("the pool after Close: %v, want open", err)
	}
}

// TestGrantedWaiterSendsNoLeave: a waiter that took its grant owes the line nothing, so closing
// its Waiter sends no statement: a handoff costs the waiter two (the refused try and the one
// that takes the grant).
func TestGrantedWaiterSendsNoLeave(t *testing.T) {
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, url)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s, c := countedStore(t, url)
	before := c.n.Load() // setting up and listening
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	w := enroll(t, s, req)
	holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"})
	<-w.C()
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("the woken waiter's try: %+v, %v; want granted", res, err)
	}
	w.Close()
	s.Close() // waits for any leave
	if n := c.n.Load() - before; n != 2 {
		t.Errorf("the waiter's Store sent %d statements, want 2 (no leave after its grant)", n)
	}
}

// TestListenerOnAnotherDatabaseIsNotTrusted: a listening connection that reaches another server
// than the pool (a wrong WithListenDSN; LISTEN through a transaction pooler is the same: nothing
// is delivered) would hear no grant. It fails its self-check, so waiters know their wakes are
// unreliable, and poll, instead of waiting for wakes that cannot come.
func TestListenerOnAnotherDatabaseIsNotTrusted(t *testing.T) {
	other := pgtest.StartServer(t)
	url, key := serverURL(t), uniqueKey(t)
	s := newStore(t, url, postgres.WithListenDSN(other.URL))
	ctx := context.Background()
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	w, err := s.Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Reliable() {
		t.Error("a waiter whose Store listens on another server says its wakes are reliable")
	}
}

// TestSetupRetriesWhenConcurrentDDLCollides: the errors two CREATE TABLE IF NOT EXISTS of one
// table, racing in two transactions, end with are retried: the other Store made the table.
func TestSetupRetriesWhenConcurrentDDLCollides(t *testing.T) {
	for _, code := range []string{"23505", "42P07", "42710"} {
		if !postgres.Retryable(&pgconn.PgError{Code: code}) {
			t.Errorf("setup gives up on SQLSTATE %s, which a Store starting beside another meets", code)
		}
	}
}

// TestStoresStartingTogetherOnFreshPrefixes: Stores that start at once on a prefix nobody has set
// up all start, though their CREATE TABLE IF NOT EXISTS statements run into each other.
func TestStoresStartingTogetherOnFreshPrefixes(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	pool := newPool(t, url)
	schema := "s" + strings.ToLower(t.Name())
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	for round := range 6 {
		errs := make(chan error, 6)
		for range 6 {
			go func() {
				s, err := postgres.New(pool, postgres.WithSchema(schema), postgres.WithTablePrefix(fmt.Sprintf("fresh%d_", round)))
				if err == nil {
					s.Close()
				}
				errs <- err
			}()
		}
		for range 6 {
			if err := <-errs; err != nil {
				t.Errorf("round %d: a Store starting beside others: %v", round, err)
			}
		}
	}
}
