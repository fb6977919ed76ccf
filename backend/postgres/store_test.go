package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
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
	t.Parallel()
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

// TestHostileInput: keys, holders and values of any bytes — SQL metacharacters, NUL, invalid
// UTF-8, a key of a megabyte — travel only as bind parameters and come back as they went; keys
// that differ in one byte are independent.
func TestHostileInput(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	if _, err := postgres.New(context.Background(), nil); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("New(nil): %v, want ErrInvalid", err)
	}
	pool := newPool(t, serverURL(t))
	for _, opt := range []postgres.Option{postgres.WithTablePrefix("Bad-Prefix"), postgres.WithTablePrefix(strings.Repeat("p", 33)),
		postgres.WithSchema(""), postgres.WithSchema("a$$b"), postgres.WithListenDSN("postgres://%zz")} {
		if _, err := postgres.New(context.Background(), pool, opt); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("New with a bad option: %v, want ErrInvalid", err)
		}
	}
}

// TestCloseEndsEverything: after Close, operations fail with ErrClosed, waiters and watches are
// woken, their places are gone from the line, and the pool is still open.
func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	pool := newPool(t, url)
	s, err := postgres.New(ctx, pool)
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

// deadListenDSN returns a DSN on which nothing listens: a Store given it as WithListenDSN has
// no listening connection, so its waiters' places name none.
func deadListenDSN(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=1"
}

// TestCloseLeavesItsWaitersPlaces: a Store closed while one of its callers waits in line (its
// waiter still open: the caller is woken by Close and only then closes it) leaves that place
// itself, as Close says ("it first sends the leaves of the line its waiters owe"). Otherwise the
// place outlives the Store: when its listener was down at the try, nothing tells the line that
// the waiter is gone, the next release grants it the lock, and the lock sits untaken for its TTL
// while a live waiter behind it waits.
func TestCloseLeavesItsWaitersPlaces(t *testing.T) {
	t.Parallel()
	for _, down := range []bool{true, false} {
		t.Run(map[bool]string{true: "listener down", false: "listener up"}[down], func(t *testing.T) {
			url, key := serverURL(t), uniqueKey(t)
			ctx := context.Background()
			var opts []postgres.Option
			if down {
				opts = append(opts, postgres.WithListenDSN(deadListenDSN(t)))
			}
			holder := newStore(t, url)
			if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			s := newStore(t, url, opts...)
			req := core.AcquireRequest{Key: key, Holder: "closed", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Hour}
			w := enroll(t, s, req)
			live := req
			live.Holder = "live"
			if res, err := holder.Acquire(ctx, live); err != nil || res.Granted {
				t.Fatalf("the live waiter's try: %+v, %v; want refused", res, err)
			}
			s.Close()
			w.Close() // the caller, woken by Close, stops waiting
			if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"}); err != nil || !ok {
				t.Fatalf("Release: %v, %v", ok, err)
			}
			snap, err := holder.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "live" {
				t.Errorf("after the closed Store's waiter and a release: leases %+v, line %+v; want the live waiter granted",
					snap.Leases, snap.Waiters)
			}
		})
	}
}

// TestCloseLeavesThePlaceOfATryInFlight: a waiting try is in flight (on a paused server) when its
// Store closes; the server resumes and refuses it with a place in line. Its caller cannot
// Register (the Store is closed), so nobody would close a waiter for it: the Store leaves that
// place itself. With the listener down at the try, nothing else would: the place names no
// listening backend for the dead-waiter pass to find gone.
func TestCloseLeavesThePlaceOfATryInFlight(t *testing.T) {
	testenv.SkipShort(t, "pauses a server")
	t.Parallel() // on a server of its own
	srv := pgtest.StartServer(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, srv.URL)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, srv.URL)
	s, err := postgres.New(ctx, pool, postgres.WithListenDSN(deadListenDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Inspect(ctx, key); err != nil { // warm the pool's connection and statements
		t.Fatal(err)
	}
	srv.Pause()
	req := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Hour}
	type result struct {
		res core.AcquireResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Acquire(ctx, req)
		done <- result{res, err}
	}()
	poll.Until(t, "the try to be in flight", func() bool { return pool.Stat().AcquiredConns() > 0 })
	s.Close()
	srv.Resume()
	r := <-done
	if r.err == nil && !r.res.Granted {
		if _, err := s.Register(ctx, req); err == nil {
			t.Fatal("Register after Close succeeded")
		}
	}
	if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	snap, err := holder.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Waiters) != 0 || len(snap.Leases) != 0 {
		t.Errorf("after a try in flight at Close (%+v, %v) and a release: leases %+v, line %+v; want the lock free",
			r.res, r.err, snap.Leases, snap.Waiters)
	}
}

// TestNumbersAtTheirLimits: TTL and Wait of core.MaxDuration, limits and permits of core.MaxLimit
// summed past 2^31, and fence floors at the driver's maxFloor keep every computation exact in
// SQL: nothing overflows a bigint or an integer, RetryAfter and Inspect's TTL come back near 100
// years, and fences still strictly increase above the highest floor.
func TestNumbersAtTheirLimits(t *testing.T) {
	t.Parallel()
	s := newStore(t, serverURL(t))
	ctx, key := context.Background(), uniqueKey(t)
	const top = core.MaxLimit
	big := core.AcquireRequest{Key: key, Holder: "big", Permits: top - 1, Limit: top, TTL: core.MaxDuration, Wait: core.MaxDuration}
	res, err := s.Acquire(ctx, big)
	if err != nil || !res.Granted {
		t.Fatalf("MaxLimit−1 permits for MaxDuration: %+v, %v", res, err)
	}
	two := core.AcquireRequest{Key: key, Holder: "two", Permits: 2, Limit: top, TTL: core.MaxDuration, Wait: core.MaxDuration}
	res, err = s.Acquire(ctx, two)
	if err != nil || res.Granted {
		t.Fatalf("2 more permits (2^31 in all): %+v, %v; want refused", res, err)
	}
	if res.RetryAfter < core.MaxDuration-time.Hour || res.RetryAfter > core.MaxDuration {
		t.Errorf("RetryAfter %v, want about core.MaxDuration", res.RetryAfter)
	}
	all := core.AcquireRequest{Key: key, Holder: "all", Permits: top, Limit: top, TTL: core.MaxDuration, Wait: core.MaxDuration}
	if res, err := s.Acquire(ctx, all); err != nil || res.Granted {
		t.Fatalf("MaxLimit permits behind: %+v, %v; want refused", res, err)
	}
	snap, err := s.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 1 || len(snap.Waiters) != 2 || snap.Limit != top {
		t.Fatalf("Inspect: %+v, %v", snap, err)
	}
	if ttl := snap.Leases[0].TTL; ttl < core.MaxDuration-time.Hour || ttl > core.MaxDuration {
		t.Errorf("Inspect's TTL %v, want about core.MaxDuration", ttl)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "big", Fence: 0}); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	// The line grants "two" (2 permits), then stops at "all", which needs every permit.
	if res, err := s.Acquire(ctx, two); err != nil || !res.Granted {
		t.Fatalf("the head of the line: %+v, %v; want granted", res, err)
	}
	s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "two"})
	if res, err := s.Acquire(ctx, all); err != nil || !res.Granted {
		t.Fatalf("MaxLimit permits at once: %+v, %v; want granted", res, err)
	}
	s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "all"})

	// Fences at the top of the range the driver takes.
	const maxFloor = math.MaxInt64 - 1<<32
	fr := core.AcquireRequest{Key: key, Holder: "f", Permits: 1, Limit: 2, TTL: time.Minute}
	if _, err := s.AcquireAbove(ctx, fr, maxFloor+1); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("a floor above maxFloor: %v, want ErrInvalid", err)
	}
	if _, err := s.RaiseFence(ctx, fr, math.MaxUint64); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("a raise to 2^64−1: %v, want ErrInvalid", err)
	}
	if snap, _ := s.Inspect(ctx, key); len(snap.Leases) != 0 {
		t.Fatalf("a refused floor changed the key: %+v", snap.Leases)
	}
	res, err = s.AcquireAbove(ctx, fr, maxFloor)
	if err != nil || !res.Granted || res.Fence != maxFloor {
		t.Fatalf("AcquireAbove(maxFloor): %+v, %v; want fence %d", res, err, uint64(maxFloor))
	}
	last := res.Fence
	for i := range 3 {
		h := fr
		h.Holder = fmt.Sprint("next", i)
		res, err := s.Acquire(ctx, h)
		if err != nil || !res.Granted || res.Fence <= last {
			t.Fatalf("a grant after the highest floor: %+v, %v; want a fence above %d", res, err, last)
		}
		last = res.Fence
		s.Release(ctx, core.ReleaseRequest{Key: key, Holder: h.Holder, Fence: res.Fence})
	}
	// A release with a fence beyond a bigint matches nothing.
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "f", Fence: math.MaxUint64}); err != nil || ok {
		t.Errorf("Release with fence 2^64−1: %v, %v; want false", ok, err)
	}
}

// TestNewFailsWithinItsContextOnAServerThatIsNotPostgreSQL: New over a pool whose address
// accepts connections and never answers, or answers in another protocol (an HTTP server's
// reply, then close), returns within its ctx's deadline with an error that says it could not
// reach the database and why, and starts nothing.
func TestNewFailsWithinItsContextOnAServerThatIsNotPostgreSQL(t *testing.T) {
	noLeaks(t)
	for _, c := range []struct {
		name  string
		serve func(net.Conn) // one accepted connection
		want  error          // what the error wraps
	}{
		{"silent", func(c net.Conn) { io.Copy(io.Discard, c) }, context.DeadlineExceeded},
		{"http", func(c net.Conn) {
			c.Read(make([]byte, 512))
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			t.Cleanup(wg.Wait)
			t.Cleanup(func() { ln.Close() })
			var mu sync.Mutex
			var conns []net.Conn
			t.Cleanup(func() {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range conns {
					c.Close()
				}
			})
			wg.Go(func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					conns = append(conns, conn)
					mu.Unlock()
					wg.Go(func() {
						defer conn.Close()
						c.serve(conn)
					})
				}
			})
			pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+ln.Addr().String()+"/postgres")
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			const deadline = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			s, err := postgres.New(ctx, pool)
			took := time.Since(start)
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			if took > deadline+time.Second {
				t.Errorf("New returned after %v, past its ctx's deadline of %v", took, deadline)
			}
			if !strings.Contains(err.Error(), "reach the database") || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("New: %v; want an error that says it could not reach the database (wrapping %v)", err, c.want)
			}
			t.Log(err)
		})
	}
}
