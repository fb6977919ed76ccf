package rediscore_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// Tests of tries whose reply never comes back to their caller: a try whose caller gave up while
// the try was still on its way to the server, and the release that the portable layer sends to
// give back what that try may have been granted; a try whose reply is lost to a client error.

// gate holds back, on the connection that writes it, the first acquire call written after it is
// armed: a slow write on one pooled connection while the client's others go through, as a
// descheduled goroutine or a retransmission makes it. It reports when it holds one, and
// when a release call's reply has come back on any connection.
type gate struct {
	armed    atomic.Bool
	held     chan struct{} // closed when an acquire is held back
	open     chan struct{} // closed by the test: the held acquire is written
	written  chan struct{} // closed when the held acquire's reply has come
	released atomic.Int32  // replies read to release calls
	// With holdLeaves, a leave call is held back until the held acquire has been written, and
	// leaving is closed when one is.
	holdLeaves bool
	leaving    chan struct{}
	leaveOnce  sync.Once
	// While dropLeaves, a leave call is never written: its write fails, as on a connection
	// reset before the bytes left.
	dropLeaves atomic.Bool
}

func newGate(holdLeaves bool) *gate {
	return &gate{held: make(chan struct{}), open: make(chan struct{}), written: make(chan struct{}),
		holdLeaves: holdLeaves, leaving: make(chan struct{})}
}

// gatedStore returns a gate (see newGate), and a go-redis client at addr whose connections pass
// through it and a Store over that client; both end with t.
func gatedStore(t *testing.T, addr string, holdLeaves bool) (*gate, *redis.Client, *goredis.Store) {
	t.Helper()
	g := newGate(holdLeaves)
	// A held write goes on once the test opens the gate, which may be after a leave's whole
	// budget: past go-redis's default write timeout (3 s), it would fail instead.
	c := redis.NewClient(&redis.Options{Addr: addr, Dialer: g.dial, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return g, c, s
}

var (
	acquireFn = []byte(rediscore.FunctionName(0)) // acquire is Script 0
	releaseFn = []byte(rediscore.FunctionName(2)) // release is Script 2
	leaveFn   = []byte(rediscore.FunctionName(4)) // leave is Script 4
)

// dial is a go-redis Dialer whose connections pass through g.
func (g *gate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, g: g}, nil
}

// errLeaveDropped is the write error of a leave call a gate drops.
var errLeaveDropped = errors.New("gate: leave dropped")

type gatedConn struct {
	net.Conn
	g            *gate
	mu           sync.Mutex
	releaseAwait bool // a release was written, its reply not read yet
	heldAwait    bool // the held acquire was written, its reply not read yet
}

func (c *gatedConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("fcall")) && bytes.Contains(b, acquireFn) && c.g.armed.CompareAndSwap(true, false) {
		close(c.g.held)
		<-c.g.open
		c.mu.Lock()
		c.heldAwait = true
		c.mu.Unlock()
	}
	if c.g.dropLeaves.Load() && bytes.Contains(b, []byte("fcall")) && bytes.Contains(b, leaveFn) {
		return 0, errLeaveDropped
	}
	if c.g.holdLeaves && bytes.Contains(b, []byte("fcall")) && bytes.Contains(b, leaveFn) {
		c.g.leaveOnce.Do(func() { close(c.g.leaving) })
		<-c.g.written
	}
	if bytes.Contains(b, releaseFn) && !bytes.Contains(b, []byte("FUNCTION")) && !bytes.Contains(b, []byte("function")) {
		c.mu.Lock()
		c.releaseAwait = true
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *gatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	if n > 0 && c.releaseAwait {
		c.releaseAwait = false
		c.g.released.Add(1)
	}
	if n > 0 && c.heldAwait {
		c.heldAwait = false
		close(c.g.written)
	}
	c.mu.Unlock()
	return n, err
}

// TestAbandonedTryIsNotGrantedAfterItsRelease: a try whose ctx's deadline passes while
// its call is still on its way (go-redis without ContextTimeoutEnabled runs such a call on a
// goroutine of its own and returns at the deadline) fails, and the Mutex gives back in the
// background what the try may have been granted, as the Store leaves the line for a try that
// would have waited. Neither may be overtaken by the try itself: whether the try reaches the
// server after the give-back and the leave, or between them, the key must be free once
// everything has arrived, not held by nobody until the lease's TTL (a minute here). For a
// TryAcquire and for an Acquire that would wait.
func TestAbandonedTryIsNotGrantedAfterItsRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		wait, holdLeaves bool
	}{
		{"try, arriving last", false, false},
		{"try, arriving before the leave", false, true},
		{"wait, arriving last", true, false},
		{"wait, arriving before the leave", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			g, c, s := gatedStore(t, srv.Addr, tc.holdLeaves)
			opts := []primitives.Option{primitives.WithTTL(time.Minute)}
			m, err := primitives.NewMutex(s, "k", opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// The library loaded, and the key used once.
			l, err := m.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			g.armed.Store(true)
			actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			failed := make(chan error, 1)
			go func() {
				var l core.Lease
				var err error
				if tc.wait {
					l, err = m.Acquire(actx)
				} else {
					l, err = m.TryAcquire(actx)
				}
				if err == nil {
					l.Release(ctx)
				}
				failed <- err
			}()
			<-g.held
			if err := <-failed; !errors.Is(err, context.DeadlineExceeded) {
				close(g.open)
				t.Fatalf("Acquire with its try held back = %v; want the deadline's error", err)
			}
			if tc.holdLeaves {
				// The leave, if any, waits for the try's reply; the give-back goes on its way.
				poll.Until(t, "the leave held back or the give-back answered", func() bool {
					select {
					case <-g.leaving:
						return true
					default:
						return g.released.Load() >= 2
					}
				})
				close(g.open)
				<-g.written
			} else {
				// The give-back (and the leave before it, if any) has been answered; then the
				// try arrives.
				poll.Until(t, "the give-back to be answered", func() bool { return g.released.Load() >= 2 })
				close(g.open)
				<-g.written
			}
			// Everything sent has been answered once every connection is back in the pool.
			poll.Until(t, "every call answered", func() bool {
				st := c.PoolStats()
				return g.released.Load() >= 2 && st.IdleConns >= st.TotalConns
			})
			other, err := primitives.NewMutex(s, "k", opts...)
			if err != nil {
				t.Fatal(err)
			}
			l, err = other.TryAcquire(ctx)
			if err != nil {
				snap, _ := s.Inspect(ctx, "k")
				t.Fatalf("after the abandoned try and its give-back, TryAcquire = %v; the key is held by %+v", err, snap.Leases)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHolderTriesAgainAfterAnAbandonedTry: a try that will not wait (a Redlock node's,
// a TryAcquire's) whose ctx's deadline passes while it is on its way is left, so that it takes
// nothing should it arrive later; but the mark is the try's, not its holder's: the same holder's
// next try (the next attempt of its acquire, a Redlock node's raise), sent once the abandoned one
// has arrived and been refused, is granted.
func TestHolderTriesAgainAfterAnAbandonedTry(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	g, _, s := gatedStore(t, srv.Addr, false)
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true}
	// The library loaded.
	if _, err := s.Inspect(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	failed := make(chan error, 1)
	go func() {
		_, err := s.Acquire(actx, req)
		failed <- err
	}()
	<-g.held
	if err := <-failed; !errors.Is(err, context.DeadlineExceeded) {
		close(g.open)
		t.Fatalf("Acquire with its try held back = %v; want the deadline's error", err)
	}
	// The leave has been answered once a Release of the holder, which waits for it, has.
	if held, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "h"}); held || err != nil {
		t.Fatalf("Release before the try arrived = %v, %v; want nothing held", held, err)
	}
	close(g.open)
	<-g.written
	if snap, err := s.Inspect(ctx, "k"); err != nil || len(snap.Leases) != 0 {
		t.Fatalf("after the abandoned try arrived, Inspect = %+v, %v; want no lease", snap, err)
	}
	// With a deadline, as a Redlock node's calls have: a try that is named.
	nctx, ncancel := context.WithTimeout(ctx, time.Minute)
	defer ncancel()
	res, err := s.Acquire(nctx, req)
	if err != nil || !res.Granted {
		t.Fatalf("the holder's next try = %+v, %v; want a grant", res, err)
	}
}

// TestTryWithLostReplyLeavesNothingBehind: a waiting try reaches the server and takes a place
// in the line, but its reply is lost to a client-side error that is not the caller's ctx (here
// go-redis's ReadTimeout, with retries off). Store.Acquire left the place only when ctx ended,
// and the primitives give up on the error, so the place stays for the whole acquire timeout,
// owned by nobody. The holder's release then grants it the lock, untaken; its Store never
// subscribed (afterTry did not run), so the PUBLISH reaching nobody counts for nothing, and the
// next caller waits for the whole TTL of a lease nobody holds.
func TestTryWithLostReplyLeavesNothingBehind(t *testing.T) {
	testenv.SkipShort(t, "delays a real server's replies")
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	ctx := context.Background()
	owner, _ := primitives.NewMutex(redisharness.Drivers["goredis"](t, srv.Addr), "lost-reply", primitives.WithTTL(time.Minute))
	l, err := owner.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	slow, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close(); c.Close() })
	gone, _ := primitives.NewMutex(slow, "lost-reply", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
	warm, _ := primitives.NewMutex(slow, "warm-up")
	if wl, err := warm.Acquire(ctx); err == nil {
		wl.Release(ctx) // connection and scripts ready: the try below is one command
	}
	proxy.SetLatency(300 * time.Millisecond)
	if _, err := gone.Acquire(ctx); err == nil {
		t.Fatal("Acquire through a read timeout succeeded")
	} else {
		t.Logf("the try failed: %v", err)
	}
	// The Store leaves for the try (on another connection, which may overtake it); the try,
	// arriving before or after, must leave no place nor lease behind.
	proxy.SetLatency(0)
	poll.Until(t, "the Store to leave for the try", func() bool { return zcard(t, srv.Addr, "lost-reply", 3) == 1 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, _ := primitives.NewMutex(redisharness.Drivers["goredis"](t, srv.Addr), "lost-reply", primitives.WithTTL(time.Minute),
		primitives.WithAcquireTimeout(3*time.Second))
	start := time.Now()
	nl, err := next.Acquire(ctx)
	if err != nil {
		snap, _ := owner.Inspect(ctx)
		t.Fatalf("nobody waits and the holder released, yet the next caller was refused for %v: %v; leases %+v",
			time.Since(start).Round(time.Millisecond), err, snap.Leases)
	}
	nl.Release(ctx)
}
