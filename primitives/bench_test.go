package primitives_test

// Benchmarks of the primitives on the in-memory store, each beside golang.org/x/sync/semaphore's
// Weighted as an in-process baseline (it has no store, no fences, no leases, so it is a floor,
// not a like-for-like rival).
//
//	go test -run '^$' -bench . -benchmem ./primitives/
//
// Every benchmark releases every lease it takes, so no lease timer or refresh in flight
// outlives it (TestMain checks with goleak).

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

const benchKey = "bench"

func benchMutex(b *testing.B, store core.Store, opts ...primitives.Option) *primitives.Mutex {
	b.Helper()
	m, err := primitives.NewMutex(store, benchKey, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func benchSemaphore(b *testing.B, store core.Store, limit int, opts ...primitives.Option) *primitives.Semaphore {
	b.Helper()
	s, err := primitives.NewSemaphore(store, benchKey, limit, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkUncontended measures one goroutine taking and releasing a lock nobody else wants:
// Acquire followed by Release, one pair per op.
func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	leasehold := func(acquire func() (core.Lease, error)) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l, err := acquire()
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("leasehold-mutex", func(b *testing.B) {
		m := benchMutex(b, memory.New())
		leasehold(func() (core.Lease, error) { return m.Acquire(ctx) })(b)
	})
	b.Run("leasehold-mutex-norefresh", func(b *testing.B) {
		m := benchMutex(b, memory.New(), primitives.WithoutRefresh())
		leasehold(func() (core.Lease, error) { return m.Acquire(ctx) })(b)
	})
	b.Run("leasehold-semaphore", func(b *testing.B) {
		s := benchSemaphore(b, memory.New(), 4)
		leasehold(func() (core.Lease, error) { return s.Acquire(ctx, 1) })(b)
	})
	b.Run("leasehold-semaphore-norefresh", func(b *testing.B) {
		s := benchSemaphore(b, memory.New(), 4, primitives.WithoutRefresh())
		leasehold(func() (core.Lease, error) { return s.Acquire(ctx, 1) })(b)
	})
	b.Run("xsync-weighted", func(b *testing.B) {
		w := semaphore.NewWeighted(1)
		b.ReportAllocs()
		for b.Loop() {
			if err := w.Acquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
			w.Release(1)
		}
	})
}

// parkSignal wraps the memory store to tell the benchmark when a waiter has committed to waiting:
// a contended Acquire is refused once, which puts it in the key's line, and then registers for
// its wake. From its Register on, a release grants it the lease from the line and wakes it.
type parkSignal struct {
	*memory.Store
	parked atomic.Bool // a refused waiter registered: it is in line, waiting for a wake
}

func (p *parkSignal) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	w, err := p.Store.Register(ctx, req)
	p.parked.Store(true)
	return w, err
}

// awaitParked spins until a waiter is parked behind the holder, and consumes the signal.
func (p *parkSignal) awaitParked() {
	for !p.parked.CompareAndSwap(true, false) {
		runtime.Gosched()
	}
}

// pingPong describes a lock to the handoff benchmark: acquire blocks until granted, release gives
// the grant back, and awaitWaiter returns once another goroutine is queued behind the holder.
type pingPong[T any] struct {
	acquire     func() T
	release     func(T)
	awaitWaiter func()
}

// runHandoff has two goroutines pass the lock back and forth b.N times, strictly in turn. The
// holder waits until the other is queued, notes the time, and releases; the other notes the time
// it is granted. The difference is one handoff's latency: release call to grant returned. ns/op
// is the whole round (including waiting for the other to queue); ns/handoff (the mean) and its
// percentiles are the latency. The mean is pulled up by rare millisecond-scale scheduling
// outliers; p50 and p99 are the steadier figures.
func runHandoff[T any](b *testing.B, p pingPong[T]) {
	b.ReportAllocs()
	n := b.N
	lat := make([]time.Duration, n+1) // lat[k]: latency of handoff k, 1 <= k <= n
	base := time.Now()
	var releasedAt atomic.Int64 // time of the latest handing-off release, since base
	markRelease := func() { releasedAt.Store(int64(time.Since(base))) }
	// granted is the number of the latest handoff received. A player does not ask for the lock
	// again until the other has received it: otherwise, on a store without FIFO handoff (the
	// memory store lets a new Acquire barge past a woken waiter), the releaser could take the
	// lock straight back and wait forever for a waiter that is already queued.
	var granted atomic.Int64

	// play receives handoffs k = first, first+2, ... <= n. A player that starts holding the lock
	// hands off handoff first-1 before it waits for its own.
	var wg sync.WaitGroup
	play := func(first int, held *T) {
		defer wg.Done()
		if held != nil {
			p.awaitWaiter()
			markRelease()
			p.release(*held)
		}
		for k := first; k <= n; k += 2 {
			for granted.Load() < int64(k-1) {
				runtime.Gosched()
			}
			t := p.acquire()
			lat[k] = time.Since(base) - time.Duration(releasedAt.Load())
			granted.Store(int64(k))
			if k < n {
				p.awaitWaiter()
				markRelease()
			}
			p.release(t)
		}
	}
	start := p.acquire()
	b.ResetTimer()
	wg.Add(2)
	go play(2, &start)
	go play(1, nil)
	wg.Wait()
	b.StopTimer()

	lat = lat[1:]
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	slices.Sort(lat)
	b.ReportMetric(float64(sum)/float64(n), "ns/handoff")
	b.ReportMetric(float64(lat[n/2]), "p50-ns/handoff")
	b.ReportMetric(float64(lat[min(n-1, n*99/100)]), "p99-ns/handoff")
}

// BenchmarkHandoff measures how long a released lock takes to reach a goroutine already waiting
// for it.
func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	leasehold := func(opts ...primitives.Option) func(*testing.B) {
		return func(b *testing.B) {
			store := &parkSignal{Store: memory.New()}
			m := benchMutex(b, store, opts...)
			runHandoff(b, pingPong[core.Lease]{
				acquire: func() core.Lease {
					l, err := m.Acquire(ctx)
					if err != nil {
						panic(err) // b.Fatal may not be called off the benchmark goroutine
					}
					return l
				},
				release: func(l core.Lease) {
					if err := l.Release(ctx); err != nil {
						panic(err)
					}
				},
				awaitWaiter: store.awaitParked,
			})
		}
	}
	b.Run("leasehold-mutex", leasehold())
	b.Run("leasehold-mutex-norefresh", leasehold(primitives.WithoutRefresh()))
	b.Run("xsync-weighted", func(b *testing.B) {
		w := semaphore.NewWeighted(1)
		runHandoff(b, pingPong[struct{}]{
			acquire: func() struct{} {
				if err := w.Acquire(ctx, 1); err != nil {
					panic(err)
				}
				return struct{}{}
			},
			release: func(struct{}) { w.Release(1) },
			// TryAcquire(0) takes nothing and fails only when someone is queued.
			awaitWaiter: func() {
				for w.TryAcquire(0) {
					runtime.Gosched()
				}
			},
		})
	})
}

// contenders is the RunParallel parallelism of BenchmarkContended: contenders*GOMAXPROCS
// goroutines compete for contendedLimit permits, so most acquires have to wait.
const (
	contenders     = 4
	contendedLimit = 4
)

// refusalCounter wraps the memory store to count refused acquires: how often a contender found the
// permits taken and had to wait.
type refusalCounter struct {
	*memory.Store
	refused atomic.Int64
}

func (r *refusalCounter) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := r.Store.Acquire(ctx, req)
	if err == nil && !res.Granted {
		r.refused.Add(1)
	}
	return res, err
}

// BenchmarkContended measures throughput of Acquire+Release pairs on one key of limit 4 from
// 4*GOMAXPROCS goroutines. For leasehold, refusals/op reports how many store acquires per pair
// were refused (so had to wait): it shows how contended the run really was.
func BenchmarkContended(b *testing.B) {
	leasehold := func(opts ...primitives.Option) func(*testing.B) {
		return func(b *testing.B) {
			// A generous acquire timeout: a barged-past waiter must not fail the run.
			o := append(slices.Clip(opts), primitives.WithAcquireTimeout(time.Minute))
			store := &refusalCounter{Store: memory.New()}
			s := benchSemaphore(b, store, contendedLimit, o...)
			defer func() { b.ReportMetric(float64(store.refused.Load())/float64(b.N), "refusals/op") }()
			b.ReportAllocs()
			b.SetParallelism(contenders)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					l, err := s.Acquire(ctx, 1)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}
	b.Run("leasehold-semaphore", leasehold())
	b.Run("leasehold-semaphore-norefresh", leasehold(primitives.WithoutRefresh()))
	b.Run("xsync-weighted", func(b *testing.B) {
		w := semaphore.NewWeighted(contendedLimit)
		b.ReportAllocs()
		b.SetParallelism(contenders)
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if err := w.Acquire(ctx, 1); err != nil {
					b.Error(err)
					return
				}
				w.Release(1)
			}
		})
	})
}
