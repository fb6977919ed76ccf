package memory_test

import (
	"context"
	"errors"
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

func TestWatchHearsAKeyMadeAgainAfterItWasDropped(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	w, err := store.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	if _, err := store.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	if n := store.Keys(); n != 0 {
		t.Fatalf("after the release the store keeps %d keys, want 0", n)
	}
	select {
	case <-w.C(): // the grant and the release
	default:
		t.Fatal("the watch did not hear the grant and release")
	}
	req.Holder, req.Limit = "b", 3
	if res, err := store.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("b on the dropped key: %+v, %v", res, err)
	}
	select {
	case <-w.C():
	default:
		t.Fatal("a watch opened before the key was dropped did not hear its next grant")
	}
}

func TestWaiterEnrolledAcrossADropIsGrantedInTheKeysNextLife(t *testing.T) {
	ctx := context.Background()
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clock))
	hold := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	if _, err := store.Acquire(ctx, hold); err != nil {
		t.Fatal(err)
	}
	wait := core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Second}
	if res, err := store.Acquire(ctx, wait); err != nil || res.Granted {
		t.Fatalf("b: %+v, %v; want a refusal", res, err)
	}
	w, err := store.Register(ctx, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// b's place and a's lease run out; the next use drops the key, and makes it again under
	// another limit.
	clock.Advance(2 * time.Minute)
	hold.Holder, hold.Limit = "c", 2
	if res, err := store.Acquire(ctx, hold); err != nil || !res.Granted {
		t.Fatalf("c of limit 2 once a and b's place are gone: %+v, %v", res, err)
	}
	// b's next try meets the key's new limit; under it, b waits again and is served.
	if _, err := store.Acquire(ctx, wait); !errors.Is(err, core.ErrLimitMismatch) {
		t.Fatalf("b of limit 1 on the key of limit 2: %v, want ErrLimitMismatch", err)
	}
	wait.Limit, wait.Permits = 2, 2
	if res, err := store.Acquire(ctx, wait); err != nil || res.Granted {
		t.Fatalf("b of 2 permits: %+v, %v; want a refusal", res, err)
	}
	if _, err := store.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "c"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	default:
		t.Fatal("b's waiter, enrolled before the key was dropped, was not woken by its grant")
	}
	if res, err := store.Acquire(ctx, wait); err != nil || !res.Granted {
		t.Fatalf("b takes its grant: %+v, %v", res, err)
	}
}

func TestRaisedFenceOutlivesTheKey(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	req := core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	if _, err := store.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	const raised = 1 << 62 // a Redlock quorum's fence, far above this store's clock
	if res, err := store.RaiseFence(ctx, req, raised); err != nil || res.Fence != raised {
		t.Fatalf("RaiseFence: %+v, %v", res, err)
	}
	if _, err := store.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	if n := store.Keys(); n != 0 {
		t.Fatalf("after the release the store keeps %d keys, want 0", n)
	}
	if res, err := store.Acquire(ctx, req); err != nil || res.Fence <= raised {
		t.Fatalf("the key's next grant: %+v, %v; want a fence above %d", res, err, uint64(raised))
	}
}
