package rediscore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// heard waits up to 10s for a value on w's C and reports whether one came; it then drains C.
func heard(w core.Watch) bool {
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
func quiet(w core.Watch) {
	for {
		select {
		case <-w.C():
		default:
			return
		}
	}
}

// reliableWatch starts a watch on key through s and waits until it is Reliable, with C drained.
func reliableWatch(t *testing.T, s core.Watcher, key string) core.Watch {
	t.Helper()
	w, err := s.Watch(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	pollUntil(t, w.Reliable)
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
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			px := redistest.StartProxy(t, srv.Addr)
			s, other := mk(t, px.Addr), mk(t, srv.Addr)
			w := reliableWatch(t, s, "flaky")
			px.Hold(true) // reconnections get nowhere until it resumes
			px.Cut()
			if !heard(w) {
				t.Fatal("the subscription dropped, and the watch's C got nothing")
			}
			pollUntil(t, func() bool { return !w.Reliable() })
			quiet(w)
			px.Hold(false)
			pollUntil(t, w.Reliable)
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
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
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
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
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
			pollUntil(t, func() bool {
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
