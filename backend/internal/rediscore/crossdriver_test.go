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
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

func TestDriversExcludeEachOther(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
		poll.Until(t, "the waiter enrolled and its subscription confirmed", w.settled) // the waiter enrolls and its subscription is confirmed
		l.Release(context.Background())
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("a release through one driver did not wake a waiter of the other (retry interval 1h, TTL 10s)")
		}
	}
}

// TestFCallAndEvalShaProcessesExcludeAndWakeEachOther: a Store that runs FCALL and one whose
// user may not use functions (EVALSHA), each driver either way, share a mutex: each excludes the
// other, and a release by one hands the lock to the other's waiter.
func TestFCallAndEvalShaProcessesExcludeAndWakeEachOther(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	aclUsers(t, srv.Addr)
	stores := userStores(srv.Addr)
	for _, pair := range [][2]string{{"goredis", "valkey"}, {"valkey", "goredis"}, {"goredis", "goredis"}, {"valkey", "valkey"}} {
		t.Run(pair[0]+"-fcall/"+pair[1]+"-evalsha", func(t *testing.T) {
			ctx := context.Background()
			key := "leasehold:mixed:" + pair[0] + pair[1]
			do(t, srv.Addr, "CONFIG", "RESETSTAT")
			f, e := stores[pair[0]](t, "new"), watch(stores[pair[1]](t, "old"))
			for _, order := range [][2]redisharness.Store{{f, e}, {e, f}} {
				first, second := order[0], order[1]
				m1, _ := primitives.NewMutex(first, key, primitives.WithTTL(time.Minute))
				m2, _ := primitives.NewMutex(second, key, primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(20*time.Second))
				l1, err := m1.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := m2.TryAcquire(ctx); err == nil && ok != nil {
					t.Fatal("both processes hold the mutex")
				}
				got := make(chan error, 1)
				go func() {
					l2, err := m2.Acquire(ctx)
					if err == nil {
						err = l2.Release(ctx)
					}
					got <- err
				}()
				if second == e {
					poll.Until(t, "the EVALSHA Store's waiter settled", e.settled)
				} else {
					poll.Until(t, "the waiter in line", func() bool { return lineLen(t, srv.Addr, key) == 1 })
				}
				if err := l1.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
			}
			if c := calls(t, srv.Addr, "fcall", "evalsha"); c["fcall"] == 0 || c["evalsha"] == 0 {
				t.Fatalf("%v: want both FCALL and EVALSHA used", c)
			}
		})
	}
}
