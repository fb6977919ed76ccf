package rediscore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// Extend end to end, through both drivers (its fast path most of all): leases
// that primitives refresh (their timer extends them) beside a line, a live watch and another
// holder's lease that expires; an untaken line grant adopted through another Store; the limit
// Extend reports; the hash's expiry an extend longer than the key's keep sets.

// otherDriver is a driver other than name's, so that two Stores of a test speak through both.
func otherDriver(name string) redisharness.Driver {
	for n, d := range redisharness.Drivers {
		if n != name {
			return d
		}
	}
	return redisharness.Drivers[name]
}

// TestRefreshedLeaseKeepsTheLineOutAndTellsNoWatch: a semaphore of 2 permits held by
// a (refreshed every 20 ms by its timer, so its extends take the fast path while the line and a
// watch live, and the general path once b's lease has expired) and b (not refreshed: it
// expires), and c waiting for both permits on a Store of the other driver. While a refreshes,
// c stays out, before b expires and after; no refresh publishes on the key's changed channel
// (the server ran no PUBLISH), so the live Watch hears nothing; a's lease is not lost; when a
// releases, c is granted and the watch hears it.
func TestRefreshedLeaseKeepsTheLineOutAndTellsNoWatch(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			sa, sc, sw := mk(t, srv.Addr), otherDriver(name)(t, srv.Addr), mk(t, srv.Addr)
			const key = "refreshed"
			var refreshes atomic.Int64
			// a's TTL outlasts a loaded machine's stalls between its refreshes (1 s did not, under
			// -race at load 20), and stays below c's wait (10 s), which sets the key's keep.
			semA, err := primitives.NewSemaphore(sa, key, 2, primitives.WithTTL(5*time.Second),
				primitives.WithRefreshInterval(20*time.Millisecond), primitives.WithEvents(func(e primitives.Event) {
					if e.Kind == primitives.EventRefreshed {
						refreshes.Add(1)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			semB, err := primitives.NewSemaphore(sa, key, 2, primitives.WithTTL(300*time.Millisecond), primitives.WithoutRefresh())
			if err != nil {
				t.Fatal(err)
			}
			semC, err := primitives.NewSemaphore(sc, key, 2, primitives.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			a, err := semA.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := semB.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan core.Lease, 1)
			go func() {
				l, err := semC.Acquire(ctx, 2)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			poll.Until(t, "c in line", func() bool { return lineLen(t, srv.Addr, key) == 1 })
			// The watch starts now, not before the grants of a and b: their messages, delivered
			// late on a loaded machine, would wake it after any draining.
			w := reliableWatch(t, sw, key)
			published := publishes(t, srv.Addr)
			out := func(when string) {
				t.Helper()
				select {
				case l := <-got:
					t.Fatalf("%s: c was granted %d permits (fence %d) while a holds one", when, l.Permits(), l.Fence())
				default:
				}
			}
			from := refreshes.Load()
			poll.Until(t, "five refreshes of a while b is live", func() bool { out("b live"); return refreshes.Load() >= from+5 })
			expired(t, sa, key, b.Holder())
			<-b.Done()
			from = refreshes.Load()
			poll.Until(t, "five refreshes of a after b expired", func() bool { out("b expired"); return refreshes.Load() >= from+5 })
			if err := a.Err(); err != nil {
				t.Fatalf("a's lease, refreshed, is lost: %v", err)
			}
			if n := publishes(t, srv.Addr); n != published {
				t.Errorf("the server ran %d PUBLISH during a's refreshes; want none (extend tells no watcher)", n-published)
			}
			select {
			case <-w.C():
				t.Error("the watch was told of a's refreshes")
			default:
			}
			out("before the release")
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case l := <-got:
				if l == nil || l.Permits() != 2 {
					t.Fatalf("c got %v", l)
				}
				l.Release(ctx)
			case <-time.After(10 * time.Second):
				t.Fatal("c was not granted after a's release")
			}
			if !heard(w) {
				t.Error("the watch did not hear the release and grant")
			}
		})
	}
}

// TestAdoptTakesAnUntakenLineGrantAcrossStores: a line grant to b (with a value),
// heard by b's Store but not taken, is adopted (Mutex.Adopt: an extend, on the fast path while
// the line and a watch live) through a Store of the other driver: the adopted lease has the
// grant's fence and value, its entry loses the untaken mark at once, and when b's waiter then
// gives up, its leave (awaited by Inspect on b's Store) does not give the lease back: c, next in
// line, is not granted until the adopter releases.
func TestAdoptTakesAnUntakenLineGrantAcrossStores(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			sb, s2 := mk(t, srv.Addr), otherDriver(name)(t, srv.Addr)
			c := raw(t, srv.Addr)
			ctx := context.Background()
			const key = "adopted"
			reliableWatch(t, s2, key)
			req := func(h, v string) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: h, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Value: v}
			}
			a := mustAcquire(t, s2, req("a", ""), true)
			mustAcquire(t, sb, req("b", "b's\n q"), false)
			wb, err := sb.Register(ctx, req("b", "b's\n q"))
			if err != nil {
				t.Fatal(err)
			}
			defer wb.Close()
			poll.Until(t, "b's waiter confirmed", wb.Reliable)
			drain(wb)
			mustAcquire(t, s2, req("c", ""), false)
			if ok, err := s2.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: a.Fence}); !ok || err != nil {
				t.Fatalf("release: %v, %v", ok, err)
			}
			select {
			case <-wb.C():
			case <-time.After(10 * time.Second):
				t.Fatal("b's waiter was not woken by the grant")
			}
			h := holdersOf(t, c, key)
			fence, _, _ := strings.Cut(strings.TrimPrefix(h["b"], "1 "), " ")
			if want := "1 " + fence + " q\nb's\n q"; h["b"] != want {
				t.Fatalf("b's grant reads %q; want %q (untaken, with its value)", h["b"], want)
			}
			m, err := primitives.NewMutex(s2, key, primitives.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			adopted, err := m.Adopt(ctx, "b")
			if err != nil {
				t.Fatalf("adopt: %v", err)
			}
			if strconv.FormatUint(adopted.Fence(), 10) != fence || adopted.Value() != "b's\n q" {
				t.Errorf("adopted fence %d, value %q; want %s, %q", adopted.Fence(), adopted.Value(), fence, "b's\n q")
			}
			if h := holdersOf(t, c, key); h["b"] != "1 "+fence+"\nb's\n q" {
				t.Errorf("after the adopt b's entry reads %q; want it taken (no ' q')", h["b"])
			}
			wb.Close()
			snap, err := sb.Inspect(ctx, key) // after b's Store's leaves for the key
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" {
				t.Fatalf("after b's waiter gave up the leases are %+v; want b's adopted lease alone", snap.Leases)
			}
			if len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "c" {
				t.Errorf("after b's waiter gave up the line is %+v; want c", snap.Waiters)
			}
			if err := adopted.Err(); err != nil {
				t.Errorf("the adopted lease is lost: %v", err)
			}
			if err := adopted.Release(ctx); err != nil {
				t.Fatal(err)
			}
			snap, err = s2.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "c" {
				t.Errorf("after the adopter released the leases are %+v; want c's grant", snap.Leases)
			}
		})
	}
}

// TestExtendReportsTheLatestLimit: a semaphore's Extend reports the key's limit, on
// the fast path and on the general one (another lease expired beside it), after grants of
// other holders and a release; and an extend far past the hash's keep makes the hash outlive
// the lease, by at most as long again.
func TestExtendReportsTheLatestLimit(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, other := mk(t, srv.Addr), otherDriver(name)(t, srv.Addr)
			c := raw(t, srv.Addr)
			ctx := context.Background()
			const key = "limits"
			acq := func(st core.Store, h string, limit int, ttl time.Duration) core.AcquireResult {
				return mustAcquire(t, st, core.AcquireRequest{Key: key, Holder: h, Permits: 1, Limit: limit, TTL: ttl}, true)
			}
			extend := func(want int, ttl time.Duration) {
				t.Helper()
				res, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "a", TTL: ttl})
				if err != nil {
					t.Fatal(err)
				}
				if res.Limit != want || res.Permits != 1 {
					t.Errorf("Extend reports limit %d, %d permits; want %d, 1", res.Limit, res.Permits, want)
				}
			}
			acq(s, "a", 3, time.Minute)
			extend(3, time.Minute)
			acq(other, "b", 3, time.Minute)
			extend(3, time.Minute)
			acq(other, "gone", 3, 10*time.Millisecond)
			expired(t, s, key, "gone")
			extend(3, time.Minute) // the general path: it deletes gone's lease
			if h := holdersOf(t, c, key); h["gone"] != "" {
				t.Errorf("gone's expired lease is still there: %q", h)
			}
			acq(other, "d", 3, time.Minute)
			if ok, err := other.Release(ctx, core.ReleaseRequest{Key: key, Holder: "d"}); !ok || err != nil {
				t.Fatalf("release: %v, %v", ok, err)
			}
			extend(3, time.Minute)
			// 30 days: past the keep a minute's lease gave the hash (two minutes).
			extend(3, 30*24*time.Hour)
			if got, ttl := pttl(t, c, key, 0), 30*24*time.Hour; got < ttl-time.Second || got > 2*ttl {
				t.Errorf("after an extend of 30 days the lease hash expires in %v; want in [%v, %v]", got, ttl, 2*ttl)
			}
			_, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "gone", TTL: time.Minute})
			if !errors.Is(err, core.ErrLost) {
				t.Errorf("Extend of an expired lease = %v; want ErrLost", err)
			}
		})
	}
}

// TestAdoptedGrantIsNotTakenBack: a lease the line granted to a waiter, not taken yet,
// is adopted by its holder id (Semaphore.Adopt, an Extend). extend.lua renews it but leaves the
// ' q' mark, so when the original waiter gives up, leave.lua drops the adopted lease and serves
// the next waiter: the adopter and that waiter are inside at once.
func TestAdoptedGrantIsNotTakenBack(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			ctx := context.Background()
			s := mk(t, srv.Addr)
			req := func(h string) core.AcquireRequest {
				return core.AcquireRequest{Key: "adopt", Holder: h, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			}
			a := mustAcquire(t, s, req("a"), true)
			mustAcquire(t, s, req("b"), false)
			wb, err := s.Register(ctx, req("b"))
			if err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, s, req("c"), false)
			wc, err := s.Register(ctx, req("c"))
			if err != nil {
				t.Fatal(err)
			}
			defer wc.Close()
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "adopt", Holder: "a", Fence: a.Fence}); !ok || err != nil {
				t.Fatalf("release: %v, %v", ok, err)
			}
			<-wb.C()
			m, _ := primitives.NewMutex(s, "adopt", primitives.WithTTL(time.Minute))
			adopted, err := m.Adopt(ctx, "b")
			if err != nil {
				t.Fatalf("adopt: %v", err)
			}
			defer adopted.StopRefresh()
			wb.Close()
			poll.Until(t, "b's place left", func() bool { return lineLen(t, srv.Addr, "adopt") <= 1 })
			// The leave runs in the background, and Inspect waits for it: the line then shows c
			// served or not (leave.lua's one call decides both).
			snap, err := s.Inspect(ctx, "adopt")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range snap.Leases {
				if l.Holder == "c" {
					t.Fatalf("the adopted lease of b was dropped by b's former waiter's leave and c granted: leases %+v", snap.Leases)
				}
			}
		})
	}
}
