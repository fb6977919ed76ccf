package memory_test

// Benchmarks of the raw store operations, below the primitives: no holder ids, no leases, no
// refresher. golang.org/x/sync/semaphore's Weighted runs beside them as an in-process floor.
//
//	go test -run '^$' -bench . -benchmem ./backend/memory/

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

const benchKey = "bench"

// BenchmarkStoreAcquireRelease measures one Store.Acquire that is granted followed by the
// Store.Release of that lease, on a key nobody else uses.
func BenchmarkStoreAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("memory-store", func(b *testing.B) {
		s := memory.New()
		req := core.AcquireRequest{Key: benchKey, Holder: "holder", Permits: 1, Limit: 1, TTL: 10 * time.Second}
		b.ReportAllocs()
		for b.Loop() {
			res, err := s.Acquire(ctx, req)
			if err != nil || !res.Granted {
				b.Fatalf("Acquire = %+v, %v", res, err)
			}
			held, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder})
			if err != nil || !held {
				b.Fatalf("Release = %v, %v", held, err)
			}
		}
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

// BenchmarkStoreInspect measures Store.Inspect of a key holding a number of unexpired leases.
// x/sync's Weighted has nothing to compare it with: it cannot list its holders.
func BenchmarkStoreInspect(b *testing.B) {
	ctx := context.Background()
	for _, leases := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("leases=%d", leases), func(b *testing.B) {
			s := memory.New()
			for i := range leases {
				req := core.AcquireRequest{Key: benchKey, Holder: fmt.Sprint("holder-", i), Permits: 1, Limit: 4, TTL: time.Hour}
				if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
					b.Fatalf("Acquire = %+v, %v", res, err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				snap, err := s.Inspect(ctx, benchKey)
				if err != nil || len(snap.Leases) != leases {
					b.Fatalf("Inspect = %+v, %v", snap, err)
				}
			}
		})
	}
}
