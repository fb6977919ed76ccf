package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// OneLeaderAtATime proves that an Election has one leader at a time, under load. It has each
// election (a campaigner's view of the key, as separate processes
// would have) campaign rounds times, hold leadership briefly and resign. No two lead at once,
// each lease carries its campaign's value, and terms strictly increase in the order granted.
func OneLeaderAtATime(t testing.TB, els []*primitives.Election, rounds int) {
	t.Helper()
	ctx := context.Background()
	occ := conformance.NewOccupancy(1)
	var last atomic.Uint64
	var terms atomic.Int64
	var wg sync.WaitGroup
	for i, el := range els {
		wg.Go(func() {
			for r := range rounds {
				value := fmt.Sprintf("c%d-%d", i, r)
				l, err := el.Campaign(ctx, value)
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				if prev := last.Swap(l.Fence()); l.Fence() <= prev {
					t.Errorf("term %d granted after term %d", l.Fence(), prev)
				}
				terms.Add(1)
				if l.Value() != value {
					t.Errorf("the leader's lease has value %q, campaigned with %q", l.Value(), value)
				}
				time.Sleep(200 * time.Microsecond)
				leave()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if occ.Peak() != 1 || terms.Load() != int64(len(els)*rounds) {
		t.Errorf("%d leaders at once, %d terms; want 1 and %d", occ.Peak(), terms.Load(), len(els)*rounds)
	}
}

// ResignHandsOver proves that a resignation hands leadership over at once: b campaigns while a leads, and is in line (inLine says so); a resigns, and
// b leads at once. b's election must have a retry interval of an hour and the TTL be long, so
// that only the handover can wake b within the 10s allowed.
func ResignHandsOver(t testing.TB, a, b *primitives.Election, inLine func() bool) {
	t.Helper()
	ctx := context.Background()
	la, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan core.Lease, 1)
	GoBackground(t, func(ctx context.Context) {
		lb, err := b.Campaign(ctx, "b")
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- lb
	})
	poll.Until(t, "the second campaigner in line", inLine)
	resigned := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			t.FailNow()
		}
		t.Logf("handed over %v after the resignation", time.Since(resigned))
		if lb.Fence() <= la.Fence() || lb.Value() != "b" {
			t.Errorf("the successor: term %d value %q; want a term above %d, value b", lb.Fence(), lb.Value(), la.Fence())
		}
		lb.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting campaigner did not lead within 10s of the resignation (retry interval 1h)")
	}
}

// LeaderCarriesTheValue proves that the leader's lease carries its campaign's value, and Leader reports
// it with the holder and term; with no leader, ok is false.
func LeaderCarriesTheValue(t testing.TB, el, other *primitives.Election) {
	t.Helper()
	ctx := context.Background()
	if ld, ok, err := other.Leader(ctx); err != nil || ok || ld != (primitives.Leader{}) {
		t.Fatalf("Leader before any campaign: %+v, %v, %v; want none", ld, ok, err)
	}
	l, err := el.Campaign(ctx, "host-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	if l.Value() != "host-a:8080" || l.Permits() != 1 || l.Key() != el.Key() {
		t.Errorf("the leader's lease: value %q, %d permits, key %q", l.Value(), l.Permits(), l.Key())
	}
	if ld, ok, err := other.Leader(ctx); err != nil || !ok || ld != LeaderOf(l) {
		t.Errorf("Leader = %+v, %v, %v; want %+v", ld, ok, err, LeaderOf(l))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ld, ok, err := other.Leader(ctx); err != nil || ok || ld != (primitives.Leader{}) {
		t.Errorf("Leader after the resignation: %+v, %v, %v; want none", ld, ok, err)
	}
}
