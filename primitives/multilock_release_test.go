package primitives_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// TestReleasingOneMemberReleasesTheWhole: a member released through Leases ends the MultiLease
// as its Release would: Done closes, Err stays nil, and the other keys are freed.
func TestReleasingOneMemberReleasesTheWhole(t *testing.T) {
	store := memory.New()
	ms, err := mustMultiLock(t, store, []string{"a", "b"}).Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, ms.Leases()[1])
	<-ms.Done()
	if err := ms.Err(); err != nil {
		t.Errorf("Err after a member's release: %v, want nil", err)
	}
	poll.Until(t, "key a released", func() bool {
		snap, err := store.Inspect(t.Context(), "a")
		return err == nil && len(snap.Leases) == 0
	})
	if err := ms.Release(t.Context()); err != nil {
		t.Errorf("Release after a member's release: %v, want nil", err)
	}
}

// lossBeforeGrant is a store that reports key "a" gone to the first Extend once a grant of "b"
// is asked for: a's lease is lost while the MultiLock waits for b.
// slowRelease delays the release of key by a second (of the bubble's clock, under synctest).
type slowRelease struct {
	core.Store
	key string
}

func (s slowRelease) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if req.Key == s.key {
		time.Sleep(time.Second)
	}
	return s.Store.Release(ctx, req)
}

// TestMultiLeaseReleaseWaitsForTheReleasesAMemberStarted: a member released alone has the others
// released in the background; a Release called meanwhile returns only once those are made, with
// every key free, not while one is still held.
func TestMultiLeaseReleaseWaitsForTheReleasesAMemberStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		ms, err := mustMultiLock(t, slowRelease{Store: mem, key: "b"}, []string{"a", "b"}).Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := ms.Leases()[0].Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // b's release under way in the background
		if err := ms.Release(context.Background()); err != nil {
			t.Errorf("Release after a member's: %v", err)
		}
		for _, k := range []string{"a", "b"} {
			if snap, _ := mem.Inspect(context.Background(), k); len(snap.Leases) != 0 {
				t.Errorf("key %s once Release returned: %+v, want free", k, snap.Leases)
			}
		}
	})
}

// failingReleases fails every release of key.
type failingReleases struct {
	core.Store
	key string
}

func (s failingReleases) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if req.Key == s.key {
		return false, errors.New("connection reset")
	}
	return s.Store.Release(ctx, req)
}

// TestMultiLockWhoseReleaseFailsLeavesTheKeyToItsTTL: a refused TryAcquire whose release of a key
// it took fails leaves that key held only until its TTL: not refreshed, and with no goroutine
// left behind (synctest fails on one).
func TestMultiLockWhoseReleaseFailsLeavesTheKeyToItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		busy := mustAcquire(t, mustMutexOn(t, mem, "b", primitives.WithTTL(time.Hour)))
		ml := mustMultiLock(t, failingReleases{Store: mem, key: "a"}, []string{"a", "b"}, primitives.WithTTL(9*time.Second))
		if _, err := ml.TryAcquire(context.Background()); !errors.Is(err, primitives.ErrNotAcquired) {
			t.Fatalf("TryAcquire with b busy: %v, want ErrNotAcquired", err)
		}
		time.Sleep(10 * time.Second) // past a's TTL, with three refreshes' worth of time
		synctest.Wait()
		if snap, _ := mem.Inspect(context.Background(), "a"); len(snap.Leases) != 0 {
			t.Errorf("key a past its TTL after its release failed: %+v, want expired (not refreshed)", snap.Leases)
		}
		busy.Release(context.Background())
	})
}

// TestMultiLeaseReleaseRacingMembersReleases: Release and releases of members through Leases, at
// once, end the MultiLease cleanly: Release returns nil, Err stays nil, Done is closed, and once
// all have returned every key is free.
func TestMultiLeaseReleaseRacingMembersReleases(t *testing.T) {
	store := memory.New()
	ml := mustMultiLock(t, store, []string{"c", "a", "b"})
	for range 100 {
		ms, err := ml.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := ms.Release(t.Context()); err != nil {
				t.Errorf("Release racing its members': %v", err)
			}
		})
		for _, l := range ms.Leases()[1:] {
			wg.Go(func() { l.Release(t.Context()) })
		}
		wg.Wait()
		select {
		case <-ms.Done():
		default:
			t.Fatal("Done open after Release")
		}
		if err := ms.Err(); err != nil {
			t.Fatalf("Err after Release: %v", err)
		}
		for _, k := range ml.Keys() {
			if snap, _ := store.Inspect(t.Context(), k); len(snap.Leases) != 0 {
				t.Fatalf("key %s once every release returned: %+v, want free", k, snap.Leases)
			}
		}
	}
}

// TestMultiLeaseReleaseWaitingForAMembersReleasesHeedsCtx: the wait for the releases a member
// ended alone began ends with ctx: Release returns then, with ctx's error, not nil while a key
// may still be held.
func TestMultiLeaseReleaseWaitingForAMembersReleasesHeedsCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		ms, err := mustMultiLock(t, slowRelease{Store: mem, key: "b"}, []string{"a", "b"}).Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := ms.Leases()[0].Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // b's release under way in the background, for a second
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = ms.Release(ctx)
		if took := time.Since(start); took != 100*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Release with 100ms to wait for a 1s release: %v after %v; want context.DeadlineExceeded after 100ms", err, took)
		}
		time.Sleep(time.Second) // the background release made
		synctest.Wait()
		if snap, _ := mem.Inspect(context.Background(), "b"); len(snap.Leases) != 0 {
			t.Errorf("key b once its background release was made: %+v, want free", snap.Leases)
		}
	})
}
