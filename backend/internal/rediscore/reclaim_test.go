package rediscore_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// A grant heard of late, or as a Store stops listening to its key, or before its waiter enrolls:
// what the Store gives back to the line, on both drivers (each Store's peer is of the other
// driver).

// heldProxy is a TCP proxy to a Redis server that, once armed, holds back what the server sends
// on the first connection that carries a grant message (a Store's subscription connection): the
// message and everything after it on that connection, until letGo; as a busy subscription
// connection, a slow consumer or a paused process delays it. Everything else passes.
type heldProxy struct {
	addr    string
	armed   atomic.Bool
	holding chan struct{} // closed when a message is held back
	release chan struct{} // closed by letGo
	once    sync.Once
	done    chan struct{}
	ln      net.Listener
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

// startHeldProxy starts a heldProxy to target; it ends with t.
func startHeldProxy(t *testing.T, target string) *heldProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &heldProxy{addr: ln.Addr().String(), holding: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{}), ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { p.pump(s, c, false) })
			p.wg.Go(func() { p.pump(c, s, true) })
		}
	})
	t.Cleanup(func() {
		close(p.done)
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// arm holds back the next grant message.
func (p *heldProxy) arm() { p.armed.Store(true) }

// letGo lets what was held back through.
func (p *heldProxy) letGo() { p.once.Do(func() { close(p.release) }) }

// pump copies src to dst; fromServer says src is the server.
func (p *heldProxy) pump(dst, src net.Conn, fromServer bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b := buf[:n]
			if fromServer && bytes.Contains(b, []byte("message")) && bytes.Contains(b, []byte(":granted:")) && p.armed.CompareAndSwap(true, false) {
				close(p.holding)
				select {
				case <-p.release:
				case <-p.done:
					return
				}
			}
			if _, err := dst.Write(b); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// overHeldProxy starts a Redis server, a heldProxy to it, a Store of the driver name through the
// proxy and one of the other driver straight to the server; the proxy lets go of what it holds
// back before the Stores close.
func overHeldProxy(t *testing.T, name string) (srv *redistest.Server, p *heldProxy, s, o redisharness.Store) {
	t.Helper()
	srv = redistest.StartServer(t)
	p = startHeldProxy(t, srv.Addr)
	s, o = redisharness.Drivers[name](t, p.addr), otherDriver(name)(t, srv.Addr)
	t.Cleanup(p.letGo)
	return srv, p, s, o
}

// holdGrantMessage arms p, has release grant the key to w's holder, and waits until w is woken
// by its Store's release and the line's message about the grant is held back.
func (p *heldProxy) holdGrantMessage(t *testing.T, w core.Wake, release func()) {
	t.Helper()
	p.arm()
	release()
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter not woken by its Store's release")
	}
	select {
	case <-p.holding:
	case <-time.After(10 * time.Second):
		t.Fatal("the grant message never came to be held back")
	}
}

// recordReclaims records the Store's decisions on grants it heard for callers that never
// enrolled; the func it returns says whether one was made, either way, for holder at key.
func recordReclaims(t *testing.T) (decided func(key, holder string) bool) {
	var mu sync.Mutex
	var seen []string
	rediscore.OnReclaim(t, func(key, holder string, fence uint64, given bool) {
		mu.Lock()
		seen = append(seen, key+" "+holder)
		mu.Unlock()
	})
	return func(key, holder string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(seen, key+" "+holder)
	}
}

// enroll sends r to s, refused, then enrolls r's holder in the key's line; the caller closes the
// waiter.
func enroll(t *testing.T, s redisharness.Store, r core.AcquireRequest) core.Wake {
	t.Helper()
	mustAcquire(t, s, r, false)
	w, err := s.Register(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// mustRelease releases holder's lease at key on s and fails t unless it was held.
func mustRelease(t *testing.T, s core.Store, key, holder string, fence uint64) {
	t.Helper()
	if ok, err := s.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: holder, Fence: fence}); !ok || err != nil {
		t.Fatalf("Release(%s) = %v, %v", holder, ok, err)
	}
}

// mustBeUntaken fails t unless holder's entry at key is marked untaken on the server at addr:
// holder took its grant without a round trip.
func mustBeUntaken(t *testing.T, addr, key, holder string) {
	t.Helper()
	if v, err := redistest.Do(addr, "HGET", rediscore.Keys(key)[0], ":"+holder); err != nil || !strings.Contains(v, " q") {
		t.Fatalf("%s's entry %q (%v); want it marked untaken: %s took its grant without a round trip", holder, v, err, holder)
	}
}

// TestLateGrantMessageLeavesTheTakenLeaseHeld: a Store's release grants the lease to its own
// waiter, which, woken by the reply, takes it without a round trip (the lease stays marked
// untaken on the server until its first refresh); the line's message about the same grant is
// held back on the Store's subscription connection. Meanwhile the key is busy: the Store's
// callers record floors enough to sweep those older than keepGrants, the holder's among them,
// and the next waiter, on another Store, waits for the key. When the message finally comes, the
// Store must not take it for a grant to a caller that never enrolled and give it back: that
// would drop the lease from under its holder and grant it to the next waiter, two holders.
func TestLateGrantMessageLeavesTheTakenLeaseHeld(t *testing.T) {
	const keep = 50 * time.Millisecond
	rediscore.SetTimings(t, rediscore.Timings{Linger: time.Minute, ReclaimAfter: 20 * time.Millisecond, KeepGrants: keep})
	for _, name := range []string{"goredis", "valkey"} {
		t.Run(name, func(t *testing.T) {
			decided := recordReclaims(t)
			srv, p, s, o := overHeldProxy(t, name)
			ctx := context.Background()
			const key = "late"
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 2, TTL: time.Minute, Wait: wait, Unshared: true}
			}
			first := mustAcquire(t, s, req("first", 0), true)
			mustAcquire(t, o, req("other", 0), true)
			w := enroll(t, s, req("b", time.Minute))
			defer w.Close()
			poll.Until(t, "b's waiter to be reliable", w.Reliable)
			drain(w)
			// Grants b: the reply wakes b, the message is held back.
			p.holdGrantMessage(t, w, func() { mustRelease(t, s, key, "first", first.Fence) })
			b := mustAcquire(t, s, req("b", time.Minute), true)
			w.Close()
			took := time.Now()
			mustBeUntaken(t, srv.Addr, key, "b")
			poll.Until(t, "b's floor to age past keepGrants", func() bool { return time.Since(took) > keep+10*time.Millisecond })
			// The key gets busy: the Store's callers come and go, each recording a floor.
			mustRelease(t, o, key, "other", 0)
			for i := range 70 {
				h := fmt.Sprint("busy-", i)
				mustRelease(t, s, key, h, mustAcquire(t, s, req(h, 0), true).Fence)
			}
			mustAcquire(t, o, req("other", 0), true)
			nw := enroll(t, o, req("next", time.Minute))
			defer nw.Close()
			p.letGo()
			poll.Until(t, "the Store to decide on b's grant", func() bool { return decided(key, "b") })
			held := holders(t, s, key) // after the leaves s is sending
			if !slices.Contains(held, "b") || slices.Contains(held, "next") {
				t.Fatalf("b holds its lease (fence %d) and the key is held by %v: two holders, the grant b took was given back to the line", b.Fence, held)
			}
			if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "b", TTL: time.Minute}); err != nil {
				t.Fatalf("b's first refresh: %v", err)
			}
		})
	}
}

// TestGrantHeardAsTheChannelExpiresIsGivenBack: a Store listens to a key (an earlier waiter
// enrolled there, and left: the subscription lingers); a caller refused there with a place in the
// line gives up before enrolling, and a release on another Store grants it the key at once. The
// Store hears of the grant and would give it back after ReclaimAfter, but its subscription's
// linger ends first. The grant must still be given back, so that the next waiter gets the key,
// not wait for the grant's one-minute TTL.
func TestGrantHeardAsTheChannelExpiresIsGivenBack(t *testing.T) {
	testenv.SkipShort(t, "waits for a linger and a reclaim, about a second (TestLingerEndingBeforeReclaimStillGivesTheGrantBack is the fast case)")
	// The linger must outlast the time from the refusal to the grant's message (a stalled
	// machine's too), and the reclaim the linger.
	rediscore.SetTimings(t, rediscore.Timings{Linger: 700 * time.Millisecond, ReclaimAfter: time.Second, KeepGrants: 2 * time.Second})
	for _, name := range []string{"goredis", "valkey"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the timings are the parent's, for both
			srv := redistest.StartServer(t)
			s, o := redisharness.Drivers[name](t, srv.Addr), otherDriver(name)(t, srv.Addr)
			ctx := context.Background()
			const key = "expiring"
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait, Unshared: true}
			}
			first := mustAcquire(t, o, req("first", 0), true)
			w := enroll(t, s, req("earlier", time.Minute))
			poll.Until(t, "the earlier waiter to be reliable", w.Reliable)
			w.Close() // s's subscription lingers from now
			poll.Until(t, "the earlier waiter to leave the line", func() bool { return lineLen(t, srv.Addr, key) == 0 })
			mustAcquire(t, s, req("gone", time.Minute), false) // and never enrolls
			nw := enroll(t, o, req("next", time.Minute))
			defer nw.Close()
			mustRelease(t, o, key, "first", first.Fence)
			poll.Until(t, "next to be granted the key", func() bool {
				snap, err := o.Inspect(ctx, key)
				return err == nil && len(snap.Leases) == 1 && snap.Leases[0].Holder == "next"
			})
			// And the subscription ends once the grant is given back.
			poll.Until(t, "the lingering subscription to end", func() bool { return subscribers(t, srv.Addr, key) == 1 })
		})
	}
}

// TestGrantMessageLaterThanItsTakeRecordLeavesTheRefreshedLeaseHeld: as above, but the message
// comes later still: after the lease's TTL and keepGrants, by when the take's record has lapsed
// (the Store may still find it, until a sweep) and the holder's floor was swept. The holder
// refreshed its lease meanwhile, which took the grant on the server (its entry no longer marked
// untaken): whether or not the Store gives the grant back, b keeps the lease, and the next
// waiter is not granted the key.
func TestGrantMessageLaterThanItsTakeRecordLeavesTheRefreshedLeaseHeld(t *testing.T) {
	testenv.SkipShort(t, "waits for a TTL and keepGrants to pass")
	const keep = 50 * time.Millisecond
	const ttl = 2 * time.Second // b refreshes within it, on a loaded machine too
	rediscore.SetTimings(t, rediscore.Timings{Linger: time.Minute, ReclaimAfter: 20 * time.Millisecond, KeepGrants: keep})
	for _, name := range []string{"goredis", "valkey"} {
		t.Run(name, func(t *testing.T) {
			decided := recordReclaims(t)
			srv, p, s, o := overHeldProxy(t, name)
			ctx := context.Background()
			const key = "later"
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: ttl, Wait: wait, Unshared: true}
			}
			first := mustAcquire(t, s, req("first", 0), true)
			w := enroll(t, s, req("b", time.Minute))
			defer w.Close()
			poll.Until(t, "b's waiter to be reliable", w.Reliable)
			drain(w)
			p.holdGrantMessage(t, w, func() { mustRelease(t, s, key, "first", first.Fence) })
			b := mustAcquire(t, s, req("b", time.Minute), true)
			took := time.Now()
			w.Close()
			mustBeUntaken(t, srv.Addr, key, "b")
			// b's first refresh, then the take's record lapses (and, the key busy, b's floor is swept).
			if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "b", TTL: time.Minute}); err != nil {
				t.Fatalf("b's first refresh: %v", err)
			}
			poll.Until(t, "the take's record to lapse", func() bool { return time.Since(took) > ttl+keep+50*time.Millisecond })
			for i := range 70 {
				h := fmt.Sprint("busy-", i)
				mustAcquire(t, s, core.AcquireRequest{Key: key + "-busy", Holder: h, Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true}, true)
				if _, err := s.Release(ctx, core.ReleaseRequest{Key: key + "-busy", Holder: h}); err != nil {
					t.Fatal(err)
				}
				mustAcquire(t, s, req(h, time.Minute), false) // a floor on the key's channel
			}
			nw := enroll(t, o, req("next", time.Minute))
			defer nw.Close()
			p.letGo()
			poll.Until(t, "the Store to decide on b's grant", func() bool { return decided(key, "b") })
			held := holders(t, s, key) // after the leaves s is sending
			if !slices.Equal(held, []string{"b"}) {
				t.Fatalf("b holds its refreshed lease (fence %d) and the key is held by %v", b.Fence, held)
			}
			if _, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "b", TTL: time.Minute}); err != nil {
				t.Fatalf("b's second refresh: %v", err)
			}
		})
	}
}

// TestWaiterEnrollingAfterItsGrantWasReclaimedIsWoken: a caller whose try was refused
// with a place in the line, on a key its Store already listens to, is granted the lease by the
// line before it enrolls (Register); it stays away longer than the Store's reclaimAfter (a long
// GC pause, a descheduled goroutine), so the Store gives the grant back to the line and, with it,
// the caller's place. When the caller then enrolls, its waiter must start woken, so that it
// tries again (and here, the key being free, is granted): not sit Reliable, sending nothing,
// until the refusal's RetryAfter (the first holder's one-minute TTL) while nobody holds the key.
func TestWaiterEnrollingAfterItsGrantWasReclaimedIsWoken(t *testing.T) {
	// The grant is given back a tenth of a second after it is heard, not the default second.
	rediscore.SetTimings(t, rediscore.Timings{Linger: 30 * time.Second, ReclaimAfter: 100 * time.Millisecond, KeepGrants: 2 * time.Second})
	eachDriverInParallel(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		ctx := context.Background()
		s, other := mk(), mk()
		req := func(holder string, wait time.Duration) core.AcquireRequest {
			return core.AcquireRequest{Key: "slow", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait, Unshared: true}
		}
		first := mustAcquire(t, other, req("first", 0), true)
		// s listens to the key: an earlier waiter of s enrolled there, and left.
		mustAcquire(t, s, req("earlier", time.Minute), false)
		w, err := s.Register(ctx, req("earlier", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, "the earlier waiter to be reliable", w.Reliable)
		w.Close()
		poll.Until(t, "the earlier waiter to leave the line", func() bool { return lineLen(t, addr, "slow") == 0 })
		// The slow caller's try: refused, with a place.
		refused := mustAcquire(t, s, req("slow", time.Minute), false)
		if refused.RetryAfter < 30*time.Second {
			t.Fatalf("the slow caller's refusal says RetryAfter %v; want the first lease's TTL", refused.RetryAfter)
		}
		if ok, err := other.Release(ctx, core.ReleaseRequest{Key: "slow", Holder: "first", Fence: first.Fence}); !ok || err != nil {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		// The line granted it the lease; s, hearing no waiter enroll, gives it back.
		poll.Until(t, "the slow caller's grant to be given back", func() bool {
			snap, err := other.Inspect(ctx, "slow")
			return err == nil && len(snap.Leases) == 0 && len(snap.Waiters) == 0
		})
		slow, err := s.Register(ctx, req("slow", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		select {
		case <-slow.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("the waiter that enrolled after its grant was given back was not woken (Reliable %v): it would wait for the RetryAfter of %v while the key is free",
				slow.Reliable(), refused.RetryAfter)
		}
		got := mustAcquire(t, s, req("slow", time.Minute), true)
		s.Release(ctx, core.ReleaseRequest{Key: "slow", Holder: "slow", Fence: got.Fence})
	})
}
