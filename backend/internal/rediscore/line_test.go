package rediscore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// Tests of a key's line: the order it serves waiters in, across Stores and drivers, how a place
// lapses with its wait, and how a grant from the line is taken.

// TestLineServesWaitersInOrderAcrossProcesses: waiters in separate Stores (separate processes,
// in effect) get the lock in the order they were refused, each handoff costing the release alone:
// the waiter takes its grant from the message.
func TestLineServesWaitersInOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
				poll.Until(t, "the waiter to take its place", func() bool { return lineLen(t, srv.Addr, "line") == i+1 })
			}
			for _, w := range ws {
				poll.Until(t, "the waiters to settle", w.settled) // subscriptions confirmed: the waiters are silent
			}
			before := commands(t, srv.Addr)
			l.Release(context.Background())
			for range waiters {
				(<-held).Release(context.Background())
			}
			wg.Wait()
			if n := commands(t, srv.Addr) - before; n != waiters+1 {
				t.Errorf("%d handoffs cost %d commands, want %d: the releases (each waiter takes its grant from the message)", waiters, n, waiters+1)
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
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: "lapse", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait}
			}
			mustAcquire(t, s, req("a", 0), true)
			mustAcquire(t, s, req("gone", 50*time.Millisecond), false)
			placed := time.Now() // after the server read its clock for gone's place, however late the call reached it
			mustAcquire(t, s, req("b", time.Minute), false)
			poll.Until(t, "gone's wait to end", func() bool { return time.Since(placed) > 100*time.Millisecond })
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
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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

// TestGrantFromLineIsTakenForItsFullTTL: a waiter in another Store, woken by the line's grant
// after waiting half its TTL or more since its refused try, takes it with one round trip that
// renews it for its full TTL from that call, so its deadline does not shrink with how long it
// waited; the fence is the grant's.
func TestGrantFromLineIsTakenForItsFullTTL(t *testing.T) {
	testenv.SkipShort(t, "waits for half a 2 s TTL")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
			poll.Until(t, "the waiter to be reliable", w.Reliable)
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
			// Let the grant age past half the TTL, as a slow waiter's would, before it is taken.
			poll.Until(t, "the grant to age past half its TTL", func() bool {
				snap, _ := s.Inspect(ctx, "taken")
				return len(snap.Leases) == 1 && snap.Leases[0].TTL < ttl/2-100*time.Millisecond
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
			// Not renewed, it would have less than half the TTL left; renewed, all but the time
			// since the taking call (a stalled machine's, at most a quarter of it).
			if left := snap.Leases[0].TTL; left < ttl*3/4 {
				t.Errorf("the taken lease has %v left by the store's clock, want its full TTL %v from the taking call", left, ttl)
			}
		})
	}
}

// TestGrantFromLineIsTakenWithoutARoundTrip: a waiter in another Store, woken by the line's grant
// soon after its refused try, takes it from the message alone: no command, the grant's fence,
// and a TTL no longer than the request's TTL less the time since the refused try was sent, which
// the store's own clock then still has left. Closing the waiter afterwards gives nothing back,
// and the lease's first Extend renews it.
func TestGrantFromLineIsTakenWithoutARoundTrip(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, other := mk(t, srv.Addr), mk(t, srv.Addr)
			ctx := context.Background()
			ttl := time.Minute
			req := core.AcquireRequest{Key: "took", Holder: "b", Permits: 1, Limit: 1, TTL: ttl, Wait: time.Minute, Unshared: true}
			mustAcquire(t, s, core.AcquireRequest{Key: "took", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
			mustAcquire(t, other, req, false)
			refused := time.Now() // after the refused try was sent
			w, err := other.Register(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "the waiter to be reliable", w.Reliable)
			drain(w)
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "took", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w.C():
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter granted from the line was not woken")
			}
			granted, _ := s.Inspect(ctx, "took")
			before := commands(t, srv.Addr)
			bound := ttl - time.Since(refused) // the waiter has waited at least this long
			res, err := other.Acquire(ctx, req)
			if err != nil || !res.Granted {
				t.Fatalf("Acquire after the grant: %+v, %v", res, err)
			}
			if n := commands(t, srv.Addr) - before; n != 0 {
				t.Errorf("taking a grant heard of sent %d commands, want 0", n)
			}
			if len(granted.Leases) != 1 || res.Fence != granted.Leases[0].Fence {
				t.Fatalf("took fence %d; the store granted %+v", res.Fence, granted.Leases)
			}
			if res.TTL <= 0 || res.TTL > bound {
				t.Fatalf("took it with TTL %v, want in (0, %v]: the request's TTL less the time since the refused try", res.TTL, bound)
			}
			w.Close()
			if err := other.Close(); err != nil { // sends whatever leaves the Store still owes
				t.Fatal(err)
			}
			snap, _ := s.Inspect(ctx, "took")
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "b" || snap.Leases[0].Fence != res.Fence {
				t.Fatalf("after the waiter's Close the store holds %+v, want b's lease kept", snap.Leases)
			}
			if left := snap.Leases[0].TTL; left < res.TTL-time.Since(refused) {
				t.Fatalf("the store gives the lease %v, less than the %v it was taken with", left, res.TTL)
			}
			if _, err := s.Extend(ctx, core.ExtendRequest{Key: "took", Holder: "b", TTL: ttl}); err != nil {
				t.Fatalf("the taken lease's Extend: %v", err)
			}
		})
	}
}

// TestLineJoinedInTheGrantsMillisecondIsOutlivedByTheHash: on miniredis, whose clock stands
// still, a waiter joins the line in the same millisecond as the grant in its way, so the line's
// expiry is the very one the grant gave the lease hash. The hash must still be kept past it: a
// PEXPIRE counts from the server's time at its call's start, up to a millisecond before the TIME
// the script read, so on a real server the two keys could expire a millisecond apart, the hash
// (with the line's place counter) first.
func TestLineJoinedInTheGrantsMillisecondIsOutlivedByTheHash(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, c := redisharness.GoRedis(t, m.Addr()), raw(t, m.Addr())
	req := func(holder string, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: "same-ms", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait}
	}
	mustAcquire(t, s, req("a", 0), true)
	mustAcquire(t, s, req("w", time.Minute), false)
	if cs := countersOf(t, c, "same-ms"); cs.keep <= cs.line {
		t.Errorf("counters keep %d, line %d: the hash must be kept past the line", cs.keep, cs.line)
	}
}

// TestLapsedPlaceIsNotRevivedBehindABlockedHead: a place whose wait ended (its waiter gone
// without a leave) behind a head that cannot be served is dead: a later try of the same holder
// takes the last place, behind the waiters who kept theirs, not its old place.
func TestLapsedPlaceIsNotRevivedBehindABlockedHead(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	acq := func(holder string, wait time.Duration) []any {
		r := script(t, c, srcAcquire, "lapsed", acquireArgv(holder, 1, 1, time.Minute, wait, false, "", "")...)
		return asArray(srcAcquire, r)
	}
	if r := acq("a", 0); r[0].(int64) != 1 {
		t.Fatalf("a: %v", r)
	}
	acq("head", time.Minute)
	acq("lapsing", 50*time.Millisecond)
	acq("kept", time.Minute)
	start := time.Now()
	poll.Until(t, "lapsing's wait to end", func() bool { return time.Since(start) > 100*time.Millisecond })
	acq("lapsing", time.Minute)
	line, err := c.ZRange(context.Background(), rediscore.Keys("lapsed")[1], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(line, " "); got != "head kept lapsing" {
		t.Errorf("line %q, want %q: a lapsed place came back ahead of a waiter", got, "head kept lapsing")
	}
}

// TestShorterWaitAfterALongerKeepsTheLine: a waiter with a short wait behind one with a long
// wait does not shorten the line: once the short wait ends, a newcomer is still refused, and the
// release grants the long waiter.
func TestShorterWaitAfterALongerKeepsTheLine(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const key = "shorter"
	acq := func(holder string, wait time.Duration) []any {
		return asArray(srcAcquire, script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, time.Minute, wait, false, "", "")...))
	}
	acq("a", 0)
	acq("long", time.Minute)
	acq("short", 30*time.Millisecond)
	start := time.Now()
	poll.Until(t, "short's wait to end", func() bool { return time.Since(start) > 60*time.Millisecond })
	if r := acq("newcomer", 0); r[0].(int64) != 0 {
		t.Fatalf("a newcomer while long waits = %v; want refused", r)
	}
	if r := asArray(srcRelease, script(t, c, srcRelease, key, "a", 0)); len(r) != 3 || r[1] != "long" {
		t.Fatalf("release = %v; want long granted", r)
	}
}
