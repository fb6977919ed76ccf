package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The cost of an uncontended pair on a local server, beside the floor of two round trips: run
// with `go test -run '^$' -bench . -benchmem ./backend/postgres/`.

func BenchmarkRoundTripPair(b *testing.B) {
	pool := newPool(b, serverURL(b))
	ctx := context.Background()
	for b.Loop() {
		for range 2 {
			if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkStorePair(b *testing.B) {
	storePair(b, core.AcquireRequest{Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
}

// BenchmarkStorePairWaiting: the requests say they would wait, as a Mutex's do.
func BenchmarkStorePairWaiting(b *testing.B) {
	storePair(b, core.AcquireRequest{Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: core.MaxDuration})
}

// storePair acquires and releases req on a key of its own, b.N times.
func storePair(b *testing.B, req core.AcquireRequest) {
	s := newStore(b, serverURL(b))
	ctx := context.Background()
	req.Key = uniqueKey(b)
	cpu := clientCPU()
	for b.Loop() {
		res, err := s.Acquire(ctx, req)
		if err != nil || !res.Granted {
			b.Fatal(res, err)
		}
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: res.Fence}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((clientCPU()-cpu).Microseconds())/float64(b.N), "client-CPU-µs/pair")
}

func BenchmarkMutexPair(b *testing.B) {
	m, err := primitives.NewMutex(newStore(b, serverURL(b)), uniqueKey(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cpu := clientCPU()
	for b.Loop() {
		l, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((clientCPU()-cpu).Microseconds())/float64(b.N), "client-CPU-µs/pair")
}

func BenchmarkStorePairNewHolders(b *testing.B) {
	s := newStore(b, serverURL(b))
	ctx, key := context.Background(), uniqueKey(b)
	i := 0
	for b.Loop() {
		i++
		holder := fmt.Sprintf("h%d", i)
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			b.Fatal(res, err)
		}
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder, Fence: res.Fence}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNotifyDelivery is the floor under a handoff's wake: one NOTIFY sent through the pool
// until a listening connection has it, with other sessions LISTENing on channels of their own
// (one per Store in a real deployment). PostgreSQL signals every listening backend of the
// database at each notifying commit, so the delivery slows with their number.
func BenchmarkNotifyDelivery(b *testing.B) {
	url := serverURL(b)
	for _, n := range []int{1, 4, 17} {
		b.Run(fmt.Sprintf("listeners=%d", n), func(b *testing.B) {
			ctx := context.Background()
			pool := newPool(b, url)
			var first *pgx.Conn
			for i := range n {
				c, err := pgx.Connect(ctx, url)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close(context.Background()) })
				if _, err := c.Exec(ctx, fmt.Sprintf("LISTEN bench_%d", i)); err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					first = c
				}
			}
			for b.Loop() {
				if _, err := pool.Exec(ctx, "SELECT pg_notify('bench_0', 'x')"); err != nil {
					b.Fatal(err)
				}
				if _, err := first.WaitForNotification(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMutexHandoff: 16 workers (and 2), each with a Store and pool of its own (16 processes,
// as peerbench runs them), take turns on one Mutex: a worker releases and at once asks again, so
// every grant goes down the line. It reports the handoffs per second, the share of grants made
// to another worker than the last holder, and the median and 99th percentile of a handoff: from
// the moment the holder starts its release to the moment the next holder's Acquire returns, and
// the median of the Release calls alone (the rest of a handoff is the wake).
// `go test -run '^$' -bench MutexHandoff -benchtime 3s ./backend/postgres/`.
func BenchmarkMutexHandoff(b *testing.B) {
	for _, workers := range []int{2, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { mutexHandoff(b, workers) })
	}
}

// mutexHandoff is BenchmarkMutexHandoff with workers Stores.
func mutexHandoff(b *testing.B, workers int) {
	url := serverURL(b)
	key := uniqueKey(b)
	ms := make([]*primitives.Mutex, workers)
	for i := range ms {
		cfg := poolConfig(b, url, func(c *pgxpool.Config) { c.MaxConns = 4 })
		m, err := primitives.NewMutex(storeOn(b, cfg), key)
		if err != nil {
			b.Fatal(err)
		}
		ms[i] = m
	}
	ctx := context.Background()
	for _, m := range ms { // connections open, statements prepared
		l, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		l.Release(ctx)
	}
	var (
		mu        sync.Mutex
		last      = -1
		released  time.Time
		handoffs  []time.Duration
		releases  []time.Duration
		grants    int
		toAnother int
		n         atomic.Int64
	)
	cpu := clientCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n.Add(1) <= int64(b.N) {
				l, err := m.Acquire(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				grants++
				if last != i && last >= 0 {
					toAnother++
					handoffs = append(handoffs, now.Sub(released))
				}
				last = i
				released = time.Now()
				mu.Unlock()
				began := time.Now()
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				took := time.Since(began)
				mu.Lock()
				releases = append(releases, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(handoffs)
	slices.Sort(releases)
	if len(releases) > 0 {
		b.ReportMetric(float64(releases[len(releases)/2].Microseconds()), "release-p50-µs")
	}
	if len(handoffs) > 0 {
		b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(grants)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(100*float64(toAnother)/float64(max(grants-1, 1)), "%to-another")
	b.ReportMetric(float64((clientCPU()-cpu).Microseconds())/float64(max(grants, 1)), "client-CPU-µs/pair")
}
