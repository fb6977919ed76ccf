package rediscore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/primitives"
)

func TestDriversExcludeEachOther(t *testing.T) {
	srv := redistest.StartServer(t)
	a, b := redisharness.Drivers["goredis"](t, srv.Addr), redisharness.Drivers["valkey"](t, srv.Addr)
	ma, _ := primitives.NewMutex(a, "shared", primitives.WithRetryInterval(time.Millisecond))
	mb, _ := primitives.NewMutex(b, "shared", primitives.WithRetryInterval(time.Millisecond))
	occ := conformance.NewOccupancy(1)
	var grants atomic.Int32
	var last atomic.Uint64
	var wg sync.WaitGroup
	for i := range 6 {
		m := ma
		if i%2 == 1 {
			m = mb
		}
		wg.Go(func() {
			for range 40 {
				l, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				if prev := last.Swap(l.Fence()); l.Fence() <= prev {
					t.Errorf("fence %d after %d", l.Fence(), prev)
				}
				grants.Add(1)
				leave()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if occ.Peak() != 1 || grants.Load() != 240 {
		t.Errorf("go-redis and valkey-go stores on one key: %d holders at once, %d grants; want 1 and 240", occ.Peak(), grants.Load())
	}
}

func TestWakeCrossesDrivers(t *testing.T) {
	srv := redistest.StartServer(t)
	a, b := redisharness.Drivers["goredis"](t, srv.Addr), redisharness.Drivers["valkey"](t, srv.Addr)
	for _, pair := range [][2]redisharness.Store{{a, b}, {b, a}} {
		holder, waiter := pair[0], pair[1]
		w := watch(waiter)
		mh, _ := primitives.NewMutex(holder, "wake")
		mw, _ := primitives.NewMutex(w, "wake", primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(time.Minute))
		l, err := mh.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Duration)
		go func() {
			l2, err := mw.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			start := time.Now()
			l2.Release(context.Background())
			got <- time.Since(start)
		}()
		pollUntil(t, w.settled) // the waiter enrolls and its subscription is confirmed
		l.Release(context.Background())
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("a release through one driver did not wake a waiter of the other (retry interval 1h, TTL 10s)")
		}
	}
}
