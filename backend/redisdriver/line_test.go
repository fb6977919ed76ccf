package redisdriver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redisdriver"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// TestLineServesWaitersInOrderAcrossProcesses: waiters in separate Stores (separate processes,
// in effect) get the lock in the order they were refused, each handoff costing the release and
// the waiter's taking its grant.
func TestLineServesWaitersInOrderAcrossProcesses(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			const waiters = 6
			s := mk(t, srv.Addr)
			warm, _ := primitives.NewMutex(s, "warm-up")
			if l, err := warm.Acquire(context.Background()); err == nil {
				l.Release(context.Background()) // load the scripts: later counts are steady state
			}
			holder, _ := primitives.NewMutex(s, "line", primitives.WithTTL(time.Minute))
			l, err := holder.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu    sync.Mutex
				order []int
				wg    sync.WaitGroup
				held  = make(chan core.Lease)
				ws    []*watched
			)
			for i := range waiters {
				w := watch(mk(t, srv.Addr))
				ws = append(ws, w)
				m, _ := primitives.NewMutex(w, "line", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
				wg.Go(func() {
					l, err := m.Acquire(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					held <- l
				})
				// The next waiter is refused after this one took its place.
				waitFor(t, func() bool { return lineLen(t, srv.Addr, "line") == i+1 })
			}
			for _, w := range ws {
				waitFor(t, w.settled) // subscriptions confirmed: the waiters are silent
			}
			before := commands(t, srv.Addr)
			l.Release(context.Background())
			for range waiters {
				(<-held).Release(context.Background())
			}
			wg.Wait()
			if n := commands(t, srv.Addr) - before; n != 2*waiters+1 {
				t.Errorf("%d handoffs cost %d commands, want %d: the releases, and each waiter's taking its grant", waiters, n, 2*waiters+1)
			}
			for i, w := range order {
				if w != i {
					t.Fatalf("waiters were served in the order %v, want the order they were refused", order)
				}
			}
		})
	}
}

// TestPlaceLapsesWithTheWait: a waiter whose wait has ended (its process gone without leaving)
// is not granted the lease; the next one is.
func TestPlaceLapsesWithTheWait(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: "lapse", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait}
			}
			mustAcquire(t, s, req("a", 0), true)
			mustAcquire(t, s, req("gone", 50*time.Millisecond), false)
			mustAcquire(t, s, req("b", time.Minute), false)
			time.Sleep(100 * time.Millisecond)
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "lapse", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			snap, err := s.Inspect(ctx, "lapse")
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" {
				t.Fatalf("after the release, leases %+v, want b's alone: gone's place had lapsed", snap.Leases)
			}
			if lineLen(t, srv.Addr, "lapse") != 0 {
				t.Errorf("the line still has %d waiters, want none", lineLen(t, srv.Addr, "lapse"))
			}
		})
	}
}

// TestSemaphoreLineIsStrictlyFIFO: the head of the line waits until its permits are free, and
// nobody behind it, nor a newcomer, takes the permits meanwhile; then the release grants the
// head and those behind it that fit, in order.
func TestSemaphoreLineIsStrictlyFIFO(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			req := func(holder string, n int) core.AcquireRequest {
				return core.AcquireRequest{Key: "fits", Holder: holder, Permits: n, Limit: 4, TTL: time.Minute, Wait: time.Minute}
			}
			mustAcquire(t, s, req("a", 2), true)
			mustAcquire(t, s, req("b", 2), true)
			mustAcquire(t, s, req("big", 3), false)
			mustAcquire(t, s, req("c", 1), false)
			mustAcquire(t, s, req("d", 1), false)
			mustAcquire(t, s, req("e", 1), false)
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "fits", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			snap, _ := s.Inspect(ctx, "fits")
			got := map[string]int{}
			for _, l := range snap.Leases {
				got[l.Holder] = l.Permits
			}
			if want := map[string]int{"b": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after releasing 2 of 4 permits with a head asking 3, leases %v, want %v", got, want)
			}
			mustAcquire(t, s, req("c", 1), false) // behind the head: waits
			newcomer := req("new", 1)
			newcomer.Wait = 0
			mustAcquire(t, s, newcomer, false) // a TryAcquire does not pass the line either
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "fits", Holder: "b"}); err != nil {
				t.Fatal(err)
			}
			snap, _ = s.Inspect(ctx, "fits")
			got = map[string]int{}
			for _, l := range snap.Leases {
				got[l.Holder] = l.Permits
			}
			if want := map[string]int{"big": 3, "c": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after every permit was freed, leases %v, want %v", got, want)
			}
			// The waiters granted take their lease on their next try, which is idempotent.
			mustAcquire(t, s, req("c", 1), true)
			mustAcquire(t, s, req("d", 1), false)
		})
	}
}

// TestGrantFromLineIsTakenForItsFullTTL: a waiter in another Store, woken by the line's grant,
// takes it with one round trip that renews it for its full TTL from that call, so its deadline
// does not shrink with how long it waited; the fence is the grant's.
func TestGrantFromLineIsTakenForItsFullTTL(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, other := mk(t, srv.Addr), mk(t, srv.Addr)
			ctx := context.Background()
			ttl := 2 * time.Second
			req := core.AcquireRequest{Key: "taken", Holder: "b", Permits: 1, Limit: 1, TTL: ttl, Wait: time.Minute}
			mustAcquire(t, s, core.AcquireRequest{Key: "taken", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
			mustAcquire(t, other, req, false)
			w, err := other.Register(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			// The waiter starts woken (its subscription is new) and is woken again when the
			// subscription is confirmed, which may come after the first wake was read. Reliable
			// means the confirmation's wake was sent: clear it, so that the next is the grant's.
			waitFor(t, w.Reliable)
			drain(w)
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "taken", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w.C():
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter granted from the line was not woken")
			}
			granted, _ := s.Inspect(ctx, "taken")
			if len(granted.Leases) != 1 || granted.Leases[0].Holder != "b" {
				t.Fatalf("after the release the store holds %+v, want b's grant from the line", granted.Leases)
			}
			// Let the grant age, as a slow waiter's would, before it is taken.
			waitFor(t, func() bool {
				snap, _ := s.Inspect(ctx, "taken")
				return len(snap.Leases) == 1 && snap.Leases[0].TTL < ttl-300*time.Millisecond
			})
			before := commands(t, srv.Addr)
			res, err := other.Acquire(ctx, req)
			if err != nil || !res.Granted {
				t.Fatalf("Acquire after the grant: %+v, %v", res, err)
			}
			if n := commands(t, srv.Addr) - before; n != 1 {
				t.Errorf("taking a grant from the line sent %d commands, want 1", n)
			}
			snap, _ := s.Inspect(ctx, "taken")
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" || snap.Leases[0].Fence != res.Fence || res.Fence != granted.Leases[0].Fence {
				t.Fatalf("the store holds %+v, want b's lease with the grant's fence %d", snap.Leases, granted.Leases[0].Fence)
			}
			if left := snap.Leases[0].TTL; left < ttl-200*time.Millisecond {
				t.Errorf("the taken lease has %v left by the store's clock, want its full TTL %v from the taking call", left, ttl)
			}
		})
	}
}

// TestStaleGrantDoesNotWake: a grant made before a holder's latest refusal (its fence not above
// the key's last fence then) does not wake the holder's waiter; a fresh one does.
func TestStaleGrantDoesNotWake(t *testing.T) {
	layout, _ := redisdriver.NewLayout(redisdriver.DefaultPrefix)
	subs := redisdriver.NewSubscriptions(layout, "store", nopPubSub{})
	ctx := context.Background()
	req := core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	ch := subs.Channel("k")
	subs.AfterTry(ctx, redisdriver.Try{}, "k", "h", false, true, 100)
	w, err := subs.Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	drain := func() bool {
		select {
		case <-w.C():
			return true
		default:
			return false
		}
	}
	drain() // it starts woken: the subscription was not confirmed before the try
	subs.Granted(ch, []redisdriver.Grant{{Holder: "h", Fence: 100}})
	if drain() {
		t.Fatal("a grant whose fence is not above the last fence at the refusal woke the waiter")
	}
	subs.Granted(ch, []redisdriver.Grant{{Holder: "other", Fence: 150}})
	if drain() {
		t.Fatal("a grant to another holder woke the waiter")
	}
	subs.Granted(ch, []redisdriver.Grant{{Holder: "h", Fence: 151}})
	if !drain() {
		t.Fatal("a fresh grant did not wake the waiter")
	}
}

type nopPubSub struct{}

func (nopPubSub) Subscribe(context.Context, string) error   { return nil }
func (nopPubSub) Unsubscribe(context.Context, string) error { return nil }

func mustAcquire(t *testing.T, s core.Store, req core.AcquireRequest, granted bool) core.AcquireResult {
	t.Helper()
	res, err := s.Acquire(context.Background(), req)
	if err != nil || res.Granted != granted {
		t.Fatalf("Acquire(%s, %d permits) = %+v, %v; want granted %v", req.Holder, req.Permits, res, err, granted)
	}
	return res
}

// lineLen returns the number of waiters in key's line.
func lineLen(t *testing.T, addr, key string) int {
	layout, _ := redisdriver.NewLayout(redisdriver.DefaultPrefix)
	v, err := redistest.Do(addr, "ZCARD", layout.Keys(key)[3])
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscan(strings.TrimPrefix(strings.TrimSpace(v), ":"), &n); err != nil {
		t.Fatalf("ZCARD: %q: %v", v, err)
	}
	return n
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGrantToCallerGoneBeforeEnrollingIsGivenBack: a caller refused with a wait that never
// enrolls (it gave up at once) is granted the lease by the line; its Store gives it back, and the
// next in line gets it, within a couple of seconds rather than the lease's TTL.
func TestGrantToCallerGoneBeforeEnrollingIsGivenBack(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
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
			waitFor(t, func() bool { return subscribers(t, srv.Addr, "gone") == 2 })
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "gone", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
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
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			s := watch(mk(t, redistest.StartServer(t).Addr))
			m, _ := primitives.NewMutex(s, "kept", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
			l, err := m.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan core.Lease, 1)
			go func() {
				l2, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
				}
				got <- l2
			}()
			waitFor(t, s.settled) // in line, subscribed: the release hands it the lease, and its message follows
			l.Release(context.Background())
			l2 := <-got
			defer l2.Release(context.Background())
			time.Sleep(1500 * time.Millisecond) // past the Store's give-back delay
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
func heldLock(t *testing.T, a, b store, key string) (ma, mb *primitives.Mutex, l core.Lease) {
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
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
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
	for name, mk := range drivers {
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
			waitFor(t, func() bool { return lineLen(t, srv.Addr, "closed") == 1 })
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
