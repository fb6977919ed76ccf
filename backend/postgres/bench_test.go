package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	for b.Loop() {
		res, err := s.Acquire(ctx, req)
		if err != nil || !res.Granted {
			b.Fatal(res, err)
		}
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: res.Fence}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMutexPair(b *testing.B) {
	m, err := primitives.NewMutex(newStore(b, serverURL(b)), uniqueKey(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		l, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
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
