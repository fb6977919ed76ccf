package etcd_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// A waiter's watch starts from the transaction that wrote its place: a release between the
// refusal and Register is not missed, whether its Store had a watch on the key already (and
// its copy of the key is used instead of the refusal's) or not.
func TestReleaseBetweenRefusalAndRegisterWakesTheWaiter(t *testing.T) {
	t.Parallel()
	for _, watched := range []bool{false, true} {
		name := "unwatched"
		if watched {
			name = "watched"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			holder, waiting, key := newStore(t), newStore(t), uniqueKey(t)
			ctx := t.Context()
			if watched {
				w, err := waiting.Watch(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			for i := range 20 {
				if res, err := holder.Acquire(ctx, req(key, "a", 1, 1)); err != nil || !res.Granted {
					t.Fatalf("round %d: Acquire(a) = %+v, %v", i, res, err)
				}
				r := req(key, "b", 1, 1)
				r.Wait = time.Minute
				if res, err := waiting.Acquire(ctx, r); err != nil || res.Granted {
					t.Fatalf("round %d: Acquire(b) = %+v, %v; want refused, in line", i, res, err)
				}
				if ok, err := holder.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
					t.Fatalf("round %d: Release(a) = %v, %v", i, ok, err)
				}
				w, err := waiting.Register(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				grantedWhenWoken(t, waiting, w, r, 30*time.Second)
				w.Close()
				if ok, err := waiting.Release(ctx, core.ReleaseRequest{Key: key, Holder: "b"}); err != nil || !ok {
					t.Fatalf("round %d: Release(b) = %v, %v", i, ok, err)
				}
			}
		})
	}
}

// A place written in the transaction that also grants the head before it (a head whose lock
// delay ended, whose own Store has not taken it yet) starts its waiter's watch from that
// transaction: the head's grant, taken and released, wakes the waiter.
func TestWaiterPlacedWithAGrantOfTheHeadIsWokenByItsRelease(t *testing.T) {
	t.Parallel()
	for _, watched := range []bool{false, true} {
		name := "unwatched"
		if watched {
			name = "watched"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			first, arriving, key := newStore(t), newStore(t), uniqueKey(t)
			ctx := t.Context()
			if watched {
				w, err := arriving.Watch(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			h := req(key, "h", 1, 1)
			h.TTL, h.LockDelay = time.Second, 2*time.Second
			if res, err := first.Acquire(ctx, h); err != nil || !res.Granted {
				t.Fatalf("Acquire(h) = %+v, %v", res, err)
			}
			poll.Within(t, 10*time.Second, "h's lease expired into its lock delay", func() (core.Snapshot, bool) {
				s, err := first.Inspect(ctx, key)
				return s, err == nil && len(s.Leases) == 0 && len(s.Delayed) == 1
			})
			// h queues behind its own lock delay, and does not register: nobody takes its grant
			// when the delay ends, until the arrival's transaction makes it.
			h.TTL, h.LockDelay, h.Wait = time.Minute, 0, time.Minute
			if res, err := first.Acquire(ctx, h); err != nil || res.Granted {
				t.Fatalf("Acquire(h) in its lock delay = %+v, %v; want refused, in line", res, err)
			}
			poll.Within(t, 10*time.Second, "h's lock delay ended", func() (core.Snapshot, bool) {
				s, err := first.Inspect(ctx, key)
				return s, err == nil && len(s.Delayed) == 0
			})
			x := req(key, "x", 1, 1)
			x.Wait = time.Minute
			if res, err := arriving.Acquire(ctx, x); err != nil || res.Granted {
				t.Fatalf("Acquire(x) = %+v, %v; want refused behind h", res, err)
			}
			// Unwatched, x's transaction decided on the records as they were, and granted h.
			// Watched, it decided on the watch's copy, which may not have seen the lock delay
			// end yet (a deletion the compare does not catch): then it granted nothing, and h's
			// own try below is granted instead.
			if s, err := first.Inspect(ctx, key); err != nil || !watched && (len(s.Leases) != 1 || s.Leases[0].Holder != "h") {
				t.Fatalf("after x's arrival: %+v, %v; want h granted by x's transaction", s, err)
			}
			w, err := arriving.Register(ctx, x)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			res, err := first.Acquire(ctx, h)
			if err != nil || !res.Granted {
				t.Fatalf("Acquire(h) taking its grant = %+v, %v", res, err)
			}
			if ok, err := first.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); err != nil || !ok {
				t.Fatalf("Release(h) = %v, %v", ok, err)
			}
			grantedWhenWoken(t, arriving, w, x, 30*time.Second)
		})
	}
}
