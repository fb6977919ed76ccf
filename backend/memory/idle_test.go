package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestReleasedKeysLeaveNothingBehind(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	for i := range 10000 {
		mu, err := primitives.NewMutex(store, fmt.Sprintf("invoice:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		l, err := mu.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := store.Keys(); n != 0 {
		t.Errorf("after 10 000 keys each acquired and released once, the store keeps %d keys, want 0", n)
	}
}

func TestKeyLeftByItsLastWaiterLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	if _, err := store.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	wreq := req
	wreq.Holder, wreq.Wait = "b", time.Minute
	if res, err := store.Acquire(ctx, wreq); err != nil || res.Granted {
		t.Fatalf("b: %+v, %v; want a refusal", res, err)
	}
	w, err := store.Register(ctx, wreq)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	w.Close() // b gives up: the grant the release made it goes back, and nobody is left
	if n := store.Keys(); n != 0 {
		t.Errorf("after the holder released and the granted waiter left, the store keeps %d keys, want 0", n)
	}
}

func TestFencesKeepIncreasingAcrossAKeysLives(t *testing.T) {
	ctx := context.Background()
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	var last uint64
	for i := range 3 {
		res, err := store.Acquire(ctx, req)
		if err != nil || !res.Granted {
			t.Fatalf("grant %d: %+v, %v", i, res, err)
		}
		if res.Fence <= last {
			t.Fatalf("grant %d after the key was dropped: fence %d, want above %d", i, res.Fence, last)
		}
		last = res.Fence
		if _, err := store.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: res.Fence}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(-time.Hour) // a clock that steps back must not bring old fences back
	}
}
