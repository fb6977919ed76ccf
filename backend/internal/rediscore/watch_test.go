package rediscore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// Tests of watch.go and watch.lua: what a watched key publishes and who hears it, across drivers,
// dropped subscriptions and a server that restarts empty.

// heard waits up to 10s for a value on w's C and reports whether one came; it then drains C.
func heard(w core.Wake) bool {
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		return false
	}
	for {
		select {
		case <-w.C():
		default:
			return true
		}
	}
}

// quiet drains w's C.
func quiet(w core.Wake) {
	for {
		select {
		case <-w.C():
		default:
			return
		}
	}
}

// reliableWatch starts a watch on key through s and waits until it is Reliable, with C drained.
func reliableWatch(t *testing.T, s core.Watcher, key string) core.Wake {
	t.Helper()
	w, err := s.Watch(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	poll.Until(t, "the watch to be reliable", w.Reliable)
	quiet(w)
	return w
}

// publishes returns how many PUBLISH commands the server at addr has run, scripts' included.
func publishes(t *testing.T, addr string) int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_publish:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

func TestWatchCrossesDrivers(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	a, b := redisharness.Drivers["goredis"](t, srv.Addr), redisharness.Drivers["valkey"](t, srv.Addr)
	for _, pair := range [][2]redisharness.Store{{a, b}, {b, a}} {
		changer, watcher := pair[0], pair[1]
		w := reliableWatch(t, watcher, "watched")
		req := core.AcquireRequest{Key: "watched", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
		res := mustAcquire(t, changer, req, true)
		if !heard(w) {
			t.Fatalf("a grant through %T did not reach a watch of %T", changer, watcher)
		}
		if _, err := changer.Release(context.Background(), core.ReleaseRequest{Key: "watched", Holder: "h", Fence: res.Fence}); err != nil {
			t.Fatal(err)
		}
		if !heard(w) {
			t.Fatalf("a release through %T did not reach a watch of %T", changer, watcher)
		}
		w.Close()
	}
}

func TestWatchReliabilityFollowsTheSubscription(t *testing.T) {
	testenv.SkipShort(t, "cuts a real server's connections")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			px := redistest.StartProxy(t, srv.Addr)
			s, other := mk(t, px.Addr), mk(t, srv.Addr)
			w := reliableWatch(t, s, "flaky")
			px.Hold(true) // reconnections get nowhere until it resumes
			px.Cut()
			if !heard(w) {
				t.Fatal("the subscription dropped, and the watch's C got nothing")
			}
			poll.Until(t, "the watch to be unreliable", func() bool { return !w.Reliable() })
			quiet(w)
			px.Hold(false)
			poll.Until(t, "the watch to be reliable again", w.Reliable)
			if !heard(w) {
				t.Fatal("the subscription came back, and the watch's C got nothing")
			}
			mustAcquire(t, other, core.AcquireRequest{Key: "flaky", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}, true)
			if !heard(w) {
				t.Fatal("a grant after the subscription came back did not reach the watch")
			}
		})
	}
}

func TestUnwatchedKeysPublishNothing(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			pair := func(key string) {
				t.Helper()
				res := mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Value: "v"}, true)
				if held, err := s.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); err != nil || !held {
					t.Fatalf("Release = %v, %v", held, err)
				}
			}
			before := publishes(t, srv.Addr)
			pair("alone")
			if n := publishes(t, srv.Addr) - before; n != 0 {
				t.Errorf("an acquire and release on a key nobody watches published %d times, want 0", n)
			}
			w := reliableWatch(t, s, "seen")
			before = publishes(t, srv.Addr)
			pair("seen")
			if n := publishes(t, srv.Addr) - before; n != 2 {
				t.Errorf("an acquire and release on a watched key published %d times, want 2", n)
			}
			if !heard(w) {
				t.Error("the watch heard nothing")
			}
			before = publishes(t, srv.Addr)
			pair("alone") // another key, while one is watched
			if n := publishes(t, srv.Addr) - before; n != 0 {
				t.Errorf("an acquire and release on a key nobody watches, beside a watched one, published %d times, want 0", n)
			}
		})
	}
}

func TestLineGrantCarriesTheValueAcrossStores(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			a, b := mk(t, srv.Addr), mk(t, srv.Addr)
			ctx := context.Background()
			const value = "a\nb q 1 2\x00{x}%"
			held := mustAcquire(t, a, core.AcquireRequest{Key: "carry", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Value: "holder a"}, true)
			req := core.AcquireRequest{Key: "carry", Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Value: value}
			mustAcquire(t, b, req, false)
			wt, err := b.Register(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			defer wt.Close()
			if snap, err := a.Inspect(ctx, "carry"); err != nil || len(snap.Waiters) != 1 || snap.Waiters[0].Value != value {
				t.Fatalf("Inspect of the line through the other Store = %+v, %v; want w with its value", snap, err)
			}
			if _, err := a.Release(ctx, core.ReleaseRequest{Key: "carry", Holder: "a", Fence: held.Fence}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "w to be granted from the line", func() bool {
				snap, err := a.Inspect(ctx, "carry")
				return err == nil && len(snap.Leases) == 1 && snap.Leases[0].Holder == "w"
			})
			for _, when := range []string{"granted by the line", "taken by the waiter's Acquire"} {
				snap, err := a.Inspect(ctx, "carry")
				if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Value != value {
					t.Fatalf("%s: Inspect = %+v, %v; want w's lease with its value", when, snap, err)
				}
				if when == "granted by the line" {
					mustAcquire(t, b, req, true)
				}
			}
			ext, err := b.Extend(ctx, core.ExtendRequest{Key: "carry", Holder: "w", TTL: time.Minute})
			if err != nil || ext.Value != value {
				t.Fatalf("Extend = %+v, %v; want the value %q", ext, err, value)
			}
		})
	}
}

// TestWatchEntryIsNoLeaseForTheTrimmedAcquire: on a watched key, the counters' entry "" counts
// no permit and holds no lease: the lease hash lives as long as the watch, a newcomer over the
// limit is refused, a line grant taken keeps the watch's deadline, and each grant and release
// wakes the watch.
func TestWatchEntryIsNoLeaseForTheTrimmedAcquire(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c, ctx := mk(t, srv.Addr), raw(t, srv.Addr), context.Background()
			w, err := s.Watch(ctx, "watched")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			poll.Until(t, "the watch to be reliable", w.Reliable)
			drain(w)
			woken := func(what string) {
				t.Helper()
				select {
				case <-w.C():
				case <-time.After(5 * time.Second):
					t.Fatalf("no wake after %s", what)
				}
			}
			req := func(holder string) core.AcquireRequest {
				return core.AcquireRequest{Key: "watched", Holder: holder, Permits: 1, Limit: 1, TTL: time.Second, Wait: time.Minute}
			}
			watch := countersOf(t, c, "watched").watch
			if watch == 0 {
				t.Fatal("no watch deadline in the counters of a watched key")
			}
			mustAcquire(t, s, req("a"), true)
			woken("a's grant")
			if p := pttl(t, c, "watched", 0); p < 20*time.Second {
				t.Errorf("lease hash PTTL %v after the first grant on a watched key, want the watch's life", p)
			}
			mustAcquire(t, s, req("b"), false)
			mustAcquire(t, s, req("a"), true) // renewal
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "watched", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			woken("a's release")
			res := mustAcquire(t, s, req("b"), true)
			h := holdersOf(t, c, "watched")
			if got, want := h["b"], fmt.Sprintf("1 %d", res.Fence); got != want || len(h) != 1 {
				t.Fatalf("leases %q, want b's taken lease %q alone", h, want)
			}
			if got := countersOf(t, c, "watched").watch; got < watch {
				t.Fatalf("the watch deadline went from %d to %d", watch, got)
			}
		})
	}
}

// TestWatchedKeyTellsOfEveryChange: while the key is watched, each call that grants a lease,
// releases one, grants the line's head or gives an untaken grant back publishes on the key's
// changed channel.
func TestWatchedKeyTellsOfEveryChange(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	const key = "told"
	sub := c.Subscribe(ctx, strings.TrimSuffix(rediscore.Keys(key)[0], "lease")+"changed")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := sub.Channel()
	told := func(what string) {
		t.Helper()
		select {
		case <-msgs:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: nothing published on the changed channel", what)
		}
		for len(msgs) > 0 {
			<-msgs
		}
	}
	acq := func(holder string, wait time.Duration) []any {
		return asArray(srcAcquire, script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, time.Minute, wait, false, "", "")...))
	}
	script(t, c, 5, key, time.Minute.Milliseconds()) // watch.lua
	acq("a", 0)
	told("a grant")
	acq("w", time.Minute)
	acq("x", time.Minute)
	script(t, c, srcRelease, key, "a", 0)
	told("a release that grants the line's head")
	script(t, c, srcLeave, key, "w", 0)
	told("a leave that gives w's untaken grant to x")
	if h := holdersOf(t, c, key); len(h) != 1 || h["x"] == "" {
		t.Fatalf("holders %q; want x's grant", h)
	}
	acq("x", 0) // taken
	script(t, c, srcRelease, key, "x", 0)
	told("a release")
	acq("b", 0)
	told("a grant after a release")
}

// A server that restarts empty loses the watch entry of holders with everything else. A watch
// that reports itself Reliable again after the reconnect must then hear the next change: a
// waiter or an observer that trusts it sleeps until a change or a lease's expiry, and with the
// entry gone no script publishes (and a successful renewal, not changing reliability, wakes
// nobody).
func TestWatchAfterServerRestart(t *testing.T) {
	testenv.SkipShort(t, "restarts a real server")
	t.Parallel()
	for name, driver := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			watcher := driver(t, srv.Addr)
			changer := driver(t, srv.Addr)
			w := reliableWatch(t, watcher, "restarted")
			srv.Restart(t)
			// Subscribed again on the new server, and confirmed.
			poll.Until(t, "the watch subscribed again and reliable", func() bool {
				out, err := redistest.Do(srv.Addr, "PUBSUB", "CHANNELS", "*changed*")
				return err == nil && strings.HasPrefix(out, "*1") && w.Reliable()
			})
			quiet(w)
			req := core.AcquireRequest{Key: "restarted", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
			poll.Until(t, "the changer's acquire to be granted", func() bool { // the changer's connection may need a try to reconnect
				res, err := changer.Acquire(t.Context(), req)
				return err == nil && res.Granted
			})
			if !heard(w) {
				t.Fatal("a grant after the server restarted did not reach a watch that reports itself reliable")
			}
		})
	}
}

// Election.Observe on a Store whose server restarted empty reports the next leader: it trusts
// its watch once the watch says it is reliable again.
func TestObserveAfterServerRestart(t *testing.T) {
	testenv.SkipShort(t, "restarts a real server")
	t.Parallel()
	for name, driver := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			observer, campaigner := driver(t, srv.Addr), driver(t, srv.Addr)
			eo, err := primitives.NewElection(observer, "el")
			if err != nil {
				t.Fatal(err)
			}
			ec, err := primitives.NewElection(campaigner, "el")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			seen := eo.Observe(ctx)
			if ld := <-seen; ld != (primitives.Leader{}) {
				t.Fatalf("first leader %+v; want none", ld)
			}
			srv.Restart(t)
			poll.Until(t, "the observer subscribed again", func() bool {
				out, err := redistest.Do(srv.Addr, "PUBSUB", "CHANNELS", "*changed*")
				return err == nil && strings.HasPrefix(out, "*1")
			})
			var lease core.Lease
			poll.Until(t, "the campaigner to win", func() bool { // the campaigner's connection may need a try to reconnect
				cctx, ccancel := context.WithTimeout(t.Context(), time.Second)
				defer ccancel()
				lease, err = ec.Campaign(cctx, "after restart")
				return err == nil
			})
			defer lease.Release(context.Background())
			deadline := time.After(10 * time.Second)
			for {
				select {
				case ld := <-seen:
					if ld.Value == "after restart" && ld.Fence == lease.Fence() {
						return
					}
				case <-deadline:
					t.Fatal("Observe did not report the leader elected after the server restarted")
				}
			}
		})
	}
}
