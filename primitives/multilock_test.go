package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

func mustMultiLock(t *testing.T, store core.Store, keys []string, opts ...primitives.Option) *primitives.MultiLock {
	t.Helper()
	ml, err := primitives.NewMultiLock(store, keys, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ml
}

// TestMultiLocksOverOverlappingKeysNeverDeadlock: four MultiLocks naming overlapping keys in
// different orders contend for eight rounds each; no key ever has two holders, and every round ends.
func TestMultiLocksOverOverlappingKeysNeverDeadlock(t *testing.T) {
	store := memory.New()
	occ := map[string]*conformance.Occupancy{"a": conformance.NewOccupancy(1), "b": conformance.NewOccupancy(1), "c": conformance.NewOccupancy(1)}
	sets := [][]string{{"a", "b"}, {"b", "a"}, {"c", "b"}, {"a", "c"}}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, keys := range sets {
		ml := mustMultiLock(t, store, keys, primitives.WithAcquireTimeout(time.Minute))
		wg.Go(func() {
			for range 8 {
				ms, err := ml.Acquire(ctx)
				if err != nil {
					t.Errorf("Acquire %v: %v", keys, err)
					return
				}
				var leave []func()
				for _, k := range keys {
					leave = append(leave, occ[k].Enter(1))
				}
				runtime.Gosched() // let the others ask while it holds
				for _, f := range leave {
					f()
				}
				if err := ms.Release(ctx); err != nil {
					t.Errorf("Release %v: %v", keys, err)
				}
			}
		})
	}
	wg.Wait()
	for k, o := range occ {
		if v := o.Violations(); len(v) > 0 {
			t.Errorf("key %s had two holders: %v", k, v)
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		if snap, err := store.Inspect(ctx, k); err != nil || len(snap.Leases) != 0 {
			t.Errorf("after the rounds, key %s: %+v, %v; want no lease", k, snap.Leases, err)
		}
	}
}

// TestMultiLeaseHoldsEveryKeyAsAMutex: while a MultiLease holds its keys a Mutex on any of them is
// refused; after its Release each is free. Leases come in the order the keys were given.
func TestMultiLeaseHoldsEveryKeyAsAMutex(t *testing.T) {
	store := memory.New()
	keys := []string{"c", "a", "b"}
	ms, err := mustMultiLock(t, store, keys).Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ls := ms.Leases()
	for i, k := range keys {
		if ls[i].Key() != k {
			t.Errorf("Leases()[%d] is on %q, want %q", i, ls[i].Key(), k)
		}
		if _, err := mustMutexOn(t, store, k).TryAcquire(t.Context()); !errors.Is(err, primitives.ErrNotAcquired) {
			t.Errorf("a Mutex on %q while the MultiLease holds it: %v, want ErrNotAcquired", k, err)
		}
	}
	if err := ms.Release(t.Context()); err != nil || ms.Err() != nil {
		t.Fatalf("Release: %v, Err %v", err, ms.Err())
	}
	select {
	case <-ms.Done():
	default:
		t.Errorf("Done not closed after Release")
	}
	for _, k := range keys {
		l, err := mustMutexOn(t, store, k).TryAcquire(t.Context())
		if err != nil {
			t.Errorf("a Mutex on %q after the Release: %v, want granted", k, err)
			continue
		}
		mustRelease(t, l)
	}
}

// TestMultiLockHoldsNothingWhenAKeyIsHeld: a try, an acquire that times out and one whose ctx ends
// all release the keys they took before the held one.
func TestMultiLockHoldsNothingWhenAKeyIsHeld(t *testing.T) {
	store := memory.New()
	held := mustAcquire(t, mustMutexOn(t, store, "b"))
	defer mustRelease(t, held)
	ml := mustMultiLock(t, store, []string{"b", "a"}, primitives.WithAcquireTimeout(50*time.Millisecond))
	if _, err := ml.TryAcquire(t.Context()); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Errorf("TryAcquire with b held: %v, want ErrNotAcquired", err)
	}
	if _, err := ml.Acquire(t.Context()); !errors.Is(err, primitives.ErrNotAcquired) || !strings.Contains(err.Error(), "acquire timeout") {
		t.Errorf("Acquire with b held: %v, want ErrNotAcquired naming the acquire timeout", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	if _, err := mustMultiLock(t, store, []string{"b", "a"}, primitives.WithAcquireTimeout(time.Minute)).Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire whose ctx ends with b held: %v, want ctx's error", err)
	}
	if snap, err := store.Inspect(t.Context(), "a"); err != nil || len(snap.Leases) != 0 {
		t.Errorf("key a after the failed acquires: %+v, %v; want free", snap.Leases, err)
	}
}

// failingExtends is a store whose Extend of one key reports the lease gone.
type failingExtends struct {
	*memory.Store
	key string
}

func (f failingExtends) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if req.Key == f.key {
		return core.ExtendResult{}, core.ErrLost
	}
	return f.Store.Extend(ctx, req)
}

// TestMultiLeaseIsLostWithAnyMember: when one key's lease is lost the MultiLease is: Done closes,
// Err wraps ErrLost naming the key, and the other keys are released.
func TestMultiLeaseIsLostWithAnyMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		ms, err := mustMultiLock(t, failingExtends{Store: mem, key: "b"}, []string{"a", "b"}, primitives.WithTTL(3*time.Second)).Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		<-ms.Done() // the first refresh, at TTL/3, finds b gone
		if err := ms.Err(); !errors.Is(err, primitives.ErrLost) || !strings.Contains(err.Error(), `"b"`) {
			t.Errorf("Err after b was lost: %v, want ErrLost naming b", err)
		}
		synctest.Wait()
		if snap, _ := mem.Inspect(context.Background(), "a"); len(snap.Leases) != 0 {
			t.Errorf("key a after b was lost: %+v, want released", snap.Leases)
		}
		if err := ms.Release(context.Background()); !errors.Is(err, primitives.ErrLost) {
			t.Errorf("Release after the loss: %v, want the loss", err)
		}
	})
}

func TestNewMultiLockRefusesBadInput(t *testing.T) {
	store := memory.New()
	for _, tc := range []struct {
		store core.Store
		keys  []string
		want  string
	}{
		{store, nil, "keys: must name at least one key"},
		{store, []string{"a", "b", "a"}, `key "a": given twice`},
		{store, []string{"a", ""}, "key"},
		{nil, []string{"a"}, "store"},
		{store, []string{strings.Repeat("k", core.MaxKeyLen+1)}, "key"},
	} {
		_, err := primitives.NewMultiLock(tc.store, tc.keys)
		if !errors.Is(err, primitives.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewMultiLock(%v): %v, want ErrInvalid naming %q", fmt.Sprintf("%.40q", tc.keys), err, tc.want)
		}
	}
	if _, err := primitives.NewMultiLock(store, []string{"a"}, primitives.WithTTL(0)); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("NewMultiLock with a bad option: %v, want ErrInvalid", err)
	}
}

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
type lossBeforeGrant struct {
	*memory.Store
	mu    sync.Mutex
	asked bool
}

func (s *lossBeforeGrant) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	if req.Key == "b" {
		s.mu.Lock()
		s.asked = true
		s.mu.Unlock()
	}
	return s.Store.Acquire(ctx, req)
}

func (s *lossBeforeGrant) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	s.mu.Lock()
	asked := s.asked
	s.mu.Unlock()
	if req.Key == "a" && asked {
		return core.ExtendResult{}, core.ErrLost
	}
	return s.Store.Extend(ctx, req)
}

// TestMultiLockLosingAKeyWhileWaitingHoldsNothing: a key lost while the MultiLock waits for the
// next is not handed out as held: the acquire fails wrapping ErrLost and releases the rest.
func TestMultiLockLosingAKeyWhileWaitingHoldsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		store := &lossBeforeGrant{Store: mem}
		held := mustAcquire(t, mustMutexOn(t, mem, "b", primitives.WithTTL(3*time.Second)))
		go func() {
			time.Sleep(2 * time.Second) // past a's first refresh, at TTL/3, which finds it gone
			held.Release(context.Background())
		}()
		ml := mustMultiLock(t, store, []string{"a", "b"}, primitives.WithTTL(3*time.Second), primitives.WithAcquireTimeout(time.Minute))
		_, err := ml.Acquire(context.Background())
		if !errors.Is(err, primitives.ErrLost) {
			t.Fatalf("Acquire after a was lost while waiting for b: %v, want ErrLost", err)
		}
		for _, k := range []string{"a", "b"} {
			if snap, _ := mem.Inspect(context.Background(), k); len(snap.Leases) != 0 {
				t.Errorf("key %s after the failed acquire: %+v, want free", k, snap.Leases)
			}
		}
	})
}

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
