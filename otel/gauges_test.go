package leaseotel_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	leaseotel "github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/primitives"
)

// TestGaugesCountHeldLeasesAndWaiters: the up-down counters say how many leases this process
// holds and how many of its acquires wait, by the bounded key attribute, as leases are granted,
// waited for, handed over and released.
func TestGaugesCountHeldLeasesAndWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t, leaseotel.WithKeyAttribute(func(key string) string { p, _, _ := strings.Cut(key, ":"); return p }))
		store := memory.New()
		m, err := primitives.NewMutex(store, "invoice:1", r.tel.Option())
		if err != nil {
			t.Fatal(err)
		}
		other, err := primitives.NewMutex(store, "invoice:2", r.tel.Option())
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, active, waiters int64) {
			t.Helper()
			synctest.Wait()
			a := r.sum(t, leaseotel.ActiveLeases, false)["leasehold.key=invoice"]
			w := r.sum(t, leaseotel.Waiters, false)["leasehold.key=invoice"]
			if a != active || w != waiters {
				t.Errorf("%s: %d active, %d waiters; want %d and %d", what, a, w, active, waiters)
			}
		}
		first, err := m.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		second, err := other.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		check("two held", 2, 0)
		got := make(chan core.Lease, 2)
		for range 2 {
			go func() {
				l, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
		}
		check("two waiting", 2, 2)
		if _, err := m.TryAcquire(t.Context()); err == nil {
			t.Fatal("TryAcquire got a held mutex")
		}
		check("a refused try", 2, 2)
		first.Release(t.Context())
		next := <-got
		check("handed over", 2, 1)
		next.Release(t.Context())
		(<-got).Release(t.Context())
		second.Release(t.Context())
		check("all released", 0, 0)
	})
}
