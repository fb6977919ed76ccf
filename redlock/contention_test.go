package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestContendedRedlockMakesProgress: over Redlock of three real servers, a Semaphore of limit 3
// with 6 workers (each with Stores of its own, asking 1, 2 or 3 permits) acquiring and
// releasing 4 times each (8 under LEASEHOLD_SOAK=1), and a Mutex with 16 workers, finish:
// waiters make progress under contention, and never exceed the limit.
func TestContendedRedlockMakesProgress(t *testing.T) {
	t.Parallel() // servers of its own: runs beside the other real-server tests
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartServer(t).Addr)
	}
	h := redisHarness{addrs}
	rounds := testenv.Pick(4, 8)
	run := func(t *testing.T, workers, limit int, permits func(w, r int) int) {
		var inUse, peak atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			sem, err := primitives.NewSemaphore(h.NewStore(t), "contended", limit, primitives.WithAcquireTimeout(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for r := range rounds {
					n := permits(w, r)
					l, err := sem.Acquire(context.Background(), n)
					if err != nil {
						t.Error(err)
						return
					}
					cur := inUse.Add(int64(n))
					for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
					}
					inUse.Add(-int64(n))
					if err := l.Release(context.Background()); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		t.Logf("%d workers × %d pairs on limit %d: %v", workers, rounds, limit, time.Since(start))
		if p := peak.Load(); p > int64(limit) {
			t.Errorf("%d permits held at once, limit %d", p, limit)
		}
	}
	t.Run("semaphore", func(t *testing.T) { run(t, 6, 3, func(w, r int) int { return 1 + (w+r)%3 }) })
	t.Run("mutex", func(t *testing.T) { run(t, 16, 1, func(int, int) int { return 1 }) })
}
