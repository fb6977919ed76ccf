package rediscore_test

import (
	"context"
	"errors"
	"math/rand/v2"
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

// TestGrantToCallerGoneBeforeEnrollingIsGivenBack: a caller refused with a wait that never
// enrolls (it gave up at once) is granted the lease by the line; its Store gives it back, and the
// next in line gets it, within a couple of seconds rather than the lease's TTL.
func TestGrantToCallerGoneBeforeEnrollingIsGivenBack(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, gone, next := mk(t, srv.Addr), mk(t, srv.Addr), mk(t, srv.Addr)
			ctx := context.Background()
			req := func(holder string) core.AcquireRequest {
				return core.AcquireRequest{Key: "gone", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			}
			mustAcquire(t, s, req("a"), true)
			mustAcquire(t, gone, req("g"), false) // refused, in line, and never enrolls
			mustAcquire(t, next, req("n"), false)
			w, err := next.Register(ctx, req("n"))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			// The line's grant to g must reach gone's Store, which gives it back.
			poll.Until(t, "gone's and next's Stores subscribed", func() bool { return subscribers(t, srv.Addr, "gone") == 2 })
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "gone", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "n granted the lease given back", func() bool {
				snap, err := s.Inspect(ctx, "gone")
				return err == nil && len(snap.Leases) == 1 && snap.Leases[0].Holder == "n"
			})
		})
	}
}

// TestHandoffInOneStoreKeepsTheLease: a waiter handed its lease from the release's reply takes
// it; the line's message about the same grant, arriving after the waiter is gone, is stale and
// must not give the lease back.
func TestHandoffInOneStoreKeepsTheLease(t *testing.T) {
	// A give-back comes reclaimAfter after the message: shortened here, so that the test waits
	// past it in a fraction of a second.
	const reclaim = 50 * time.Millisecond
	rediscore.SetTimings(t, rediscore.Timings{Linger: 30 * time.Second, ReclaimAfter: reclaim, KeepGrants: 2 * time.Second})
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the parent's timings are both drivers'
			s := watch(mk(t, redistest.StartServer(t).Addr))
			m, _ := primitives.NewMutex(s, "kept", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
			l, err := m.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := acquireInBackground(t, m)
			poll.Until(t, "the waiter in line and subscribed", s.settled) // in line, subscribed: the release hands it the lease, and its message follows
			l.Release(context.Background())
			l2 := <-got
			defer l2.Release(context.Background())
			// Nothing to wait for: the check is that nothing happens, for ten give-back delays.
			time.Sleep(10 * reclaim)
			snap, err := s.Inspect(context.Background(), "kept")
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != l2.Holder() {
				t.Fatalf("leases %+v, want %s's alone: the grant's late message gave it back", snap.Leases, l2.Holder())
			}
		})
	}
}

// heldLock returns mutexes on key over a and b, and a lease taken through a's.
func heldLock(t *testing.T, a, b redisharness.Store, key string) (ma, mb *primitives.Mutex, l core.Lease) {
	t.Helper()
	ma, _ = primitives.NewMutex(a, key, primitives.WithTTL(time.Minute))
	mb, _ = primitives.NewMutex(b, key, primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
	l, err := ma.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ma, mb, l
}

// TestWaiterGivingUpAsItsStoreClosesLeavesTheLine: a waiter cancelled just before its Store is
// closed (the usual shutdown order) still leaves the line, so the next release does not hand
// the lock to a caller that is gone.
func TestWaiterGivingUpAsItsStoreClosesLeavesTheLine(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			b := mk(t, srv.Addr)
			ma, mb, l := heldLock(t, mk(t, srv.Addr), b, "closing")
			ctx := context.Background()
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if _, err := mb.Acquire(wctx); err == nil {
				t.Fatal("the waiter acquired a held lock")
			}
			b.Close()
			if n := lineLen(t, srv.Addr, "closing"); n != 0 {
				t.Errorf("after the waiter gave up and its Store closed, the line has %d waiters, want 0", n)
			}
			l.Release(ctx)
			if l2, err := ma.TryAcquire(ctx); err != nil {
				t.Fatalf("the lock was released, yet TryAcquire: %v", err)
			} else {
				l2.Release(ctx)
			}
		})
	}
}

// TestClosingStoreGivesUpItsWaitersPlaces: a Store closed while its waiters wait (they then fail
// with ErrClosed) takes them out of the line: before Close returns for the places it knows of,
// and before the waiter's Acquire returns for a try whose refusal comes back after Close.
func TestClosingStoreGivesUpItsWaitersPlaces(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			b := mk(t, srv.Addr)
			_, mb, l := heldLock(t, mk(t, srv.Addr), b, "closed")
			ctx := context.Background()
			done := make(chan error, 1)
			go func() {
				_, err := mb.Acquire(ctx)
				done <- err
			}()
			poll.Until(t, "the waiter in line", func() bool { return lineLen(t, srv.Addr, "closed") == 1 })
			b.Close() // enrolled or not, or its try still out: its Store owes the line its place
			if err := <-done; !errors.Is(err, core.ErrClosed) {
				t.Errorf("the waiter's Acquire: %v, want ErrClosed", err)
			}
			if n := lineLen(t, srv.Addr, "closed"); n != 0 {
				t.Errorf("after its Store closed and its Acquire returned, the line has %d waiters, want 0", n)
			}
			l.Release(ctx)
		})
	}
}

// TestCanceledWaitersStrandNothing: a waiter's ctx ends at a random moment (before its
// try, while the try is out, between the refusal and its enrolling, while it waits, as the
// line grants it the lease, as it takes the grant from the message) while the holder releases at
// another random moment, on both drivers and mixed, with ctx canceled (the direct path of
// go-redis, valkey's graceCtx) and with a deadline (go-redis's call goroutine, valkey-go's
// deadline). Whatever the waiter's Acquire returned, once its lease (if any) is released and
// the background leaves and give-backs are done, the key is free: no lease nobody will release
// (held until its TTL, a minute) and no place nobody will leave.
func TestCanceledWaitersStrandNothing(t *testing.T) {
	t.Parallel()
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		a, b, observer := mk(), mk(), mk()
		opts := []primitives.Option{primitives.WithTTL(time.Minute)}
		ma, err := primitives.NewMutex(a, "cancel", opts...)
		if err != nil {
			t.Fatal(err)
		}
		mb, err := primitives.NewMutex(b, "cancel", opts...)
		if err != nil {
			t.Fatal(err)
		}
		rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		ctx := context.Background()
		for i := range 40 {
			held, err := ma.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cancelAt := time.Duration(rnd.IntN(4000)) * time.Microsecond
			releaseAt := time.Duration(rnd.IntN(4000)) * time.Microsecond
			var wctx context.Context
			var cancel context.CancelFunc
			if rnd.IntN(2) == 0 {
				wctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(cancelAt, cancel)
			} else {
				wctx, cancel = context.WithTimeout(ctx, cancelAt)
			}
			got := make(chan core.Lease, 1)
			go func() {
				l, err := mb.Acquire(wctx)
				if err != nil {
					l = nil
				}
				got <- l
			}()
			time.AfterFunc(releaseAt, func() { held.Release(ctx) })
			if l := <-got; l != nil {
				if err := l.Release(ctx); err != nil {
					t.Errorf("round %d: Release of the waiter's lease: %v", i, err)
				}
			}
			cancel()
			poll.Until(t, "the key free: no lease, no place", func() bool {
				select {
				case <-held.Done():
				default:
					return false
				}
				snap, err := observer.Inspect(ctx, "cancel")
				if err != nil {
					t.Fatal(err)
				}
				return len(snap.Leases) == 0 && len(snap.Waiters) == 0
			})
		}
	})
}

// TestAwaitLeaveEndsWithCtx guards Store.Acquire's wait for a pending leave (waitline.Leaves.AwaitHolder): a holder's next try waits for its pending
// leave of the key, but no longer than its ctx, even when the leave hangs (a partition); and
// Close returns once the hung leave gives up (waitline.LeaveBudget), not never.
func TestAwaitLeaveEndsWithCtx(t *testing.T) {
	testenv.SkipShort(t, "partitions the client from redis-server (a fault proxy) for waitline.LeaveBudget")
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	owner := redisharness.Drivers["goredis"](t, srv.Addr)
	mustAcquire(t, owner, core.AcquireRequest{Key: "await", Holder: "owner", Permits: 1, Limit: 1, TTL: time.Minute}, true)
	req := core.AcquireRequest{Key: "await", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	mustAcquire(t, s, req, false)
	w, err := s.Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Hold(true)
	w.Close() // the leave goes out, and hangs
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Acquire(short, req)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 1500*time.Millisecond {
		t.Fatalf("next try with a 200ms ctx behind a hung leave: %v after %v", err, took)
	}
	start = time.Now()
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		proxy.Hold(false)
		t.Fatal("Close did not return within 10s of a hung leave")
	}
	proxy.Hold(false)
	t.Logf("Close returned after %v", time.Since(start).Round(time.Millisecond))
}
