package primitives_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// obsCounter17 counts Inspects; its Watch (when watch is set) forwards to the memory store,
// reporting itself reliable or not as reliable says.
type obsCounter17 struct {
	core.Store
	mem      *memory.Store
	inspects atomic.Int64
}

func (c *obsCounter17) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	c.inspects.Add(1)
	return c.Store.Inspect(ctx, key)
}

type obsWatching17 struct {
	*obsCounter17
	reliable bool
}

func (c *obsWatching17) Watch(ctx context.Context, key string) (core.Watch, error) {
	w, err := c.mem.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	return obsReliability17{w, c.reliable}, nil
}

type obsReliability17 struct {
	core.Watch
	reliable bool
}

func (r obsReliability17) Reliable() bool { return r.reliable }

// Observe reads the store as its doc says, in a bubble's fake time: with a reliable watch, not
// at all while there is no leader and no change, and about once per leader's TTL while one
// leads; with an unreliable watch or none, every ten retry intervals; never in a loop. A leader
// that dies is reported gone within its TTL, and a new one at once.
func TestObserveReadsAsDocumented_review17(t *testing.T) {
	for _, tc := range []struct {
		name             string
		watch, reliable  bool
		idleMin, idleMax int64 // reads in 10s with no leader
		leadMin, leadMax int64 // reads in 60s with a leader of TTL 10s
	}{
		{"reliable watch", true, true, 0, 0, 5, 25},
		{"unreliable watch", true, false, 90, 110, 590, 640},
		{"no watch", false, false, 90, 110, 590, 640},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				ic := &obsCounter17{Store: mem, mem: mem}
				var store core.Store = ic
				if tc.watch {
					store = &obsWatching17{obsCounter17: ic, reliable: tc.reliable}
				}
				obs, err := primitives.NewElection(store, "el", primitives.WithRetryInterval(10*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				seen := obs.Observe(ctx)
				if ld := <-seen; ld != (primitives.Leader{}) {
					t.Fatalf("first: %+v", ld)
				}
				synctest.Wait()
				base := ic.inspects.Load()
				time.Sleep(10 * time.Second)
				synctest.Wait()
				if n := ic.inspects.Load() - base; n < tc.idleMin || n > tc.idleMax {
					t.Errorf("%d reads in 10s without a leader; want %d..%d", n, tc.idleMin, tc.idleMax)
				}
				el, err := primitives.NewElection(mem, "el", primitives.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				l, err := el.Campaign(ctx, "a")
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				if ld := <-seen; ld.Value != "a" || ld.Fence != l.Fence() {
					t.Fatalf("leader %+v", ld)
				}
				if d := time.Since(start); tc.reliable && d > 0 {
					t.Errorf("a new leader reported after %v; want at once", d)
				}
				synctest.Wait()
				base = ic.inspects.Load()
				time.Sleep(60 * time.Second)
				synctest.Wait()
				if n := ic.inspects.Load() - base; n < tc.leadMin || n > tc.leadMax {
					t.Errorf("%d reads in 60s with a leader; want %d..%d", n, tc.leadMin, tc.leadMax)
				}
				// The leader dies: its lease is no longer refreshed, and ends by its TTL.
				l.StopRefresh()
				died := time.Now()
				select {
				case ld := <-seen:
					if ld != (primitives.Leader{}) {
						t.Fatalf("after the leader died: %+v", ld)
					}
				case <-time.After(11 * time.Second):
					t.Fatal("a dead leader not reported gone within its TTL")
				}
				if d := time.Since(died); d > 10*time.Second+200*time.Millisecond {
					t.Errorf("a dead leader reported gone after %v", d)
				}
				cancel()
				for range seen {
				}
			})
		})
	}
}
