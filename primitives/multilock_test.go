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
		if !errors.Is(err, primitives.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "leasehold: new multilock [") {
			t.Errorf("NewMultiLock(%v): %v, want ErrInvalid naming new multilock, its keys and %q", fmt.Sprintf("%.40q", tc.keys), err, tc.want)
		}
	}
	if _, err := primitives.NewMultiLock(store, []string{"a"}, primitives.WithTTL(0)); !errors.Is(err, primitives.ErrInvalid) {
		t.Errorf("NewMultiLock with a bad option: %v, want ErrInvalid", err)
	}
}

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

// TestMultiLockCanceledMidwayReleasesWhatItTookAndLeavesTheLine: an Acquire holding a and waiting
// for b whose ctx ends returns the ctx's error holding nothing: a is freed, and b, released by
// its holder afterwards, is free too (no grant kept for the waiter that left), with no goroutine
// left behind (synctest fails on one).
func TestMultiLockCanceledMidwayReleasesWhatItTookAndLeavesTheLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		held := mustAcquire(t, mustMutexOn(t, store, "b"))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := mustMultiLock(t, store, []string{"b", "a"}, primitives.WithAcquireTimeout(time.Hour)).Acquire(ctx)
			errc <- err
		}()
		synctest.Wait() // holding a, in b's line
		if snap, _ := store.Inspect(context.Background(), "a"); len(snap.Leases) != 1 {
			t.Fatalf("key a while b is awaited: %+v, want held", snap.Leases)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "acquire multilock") {
			t.Errorf("Acquire canceled midway: %v, want context.Canceled naming the operation", err)
		}
		if err := held.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, k := range []string{"a", "b"} {
			if snap, _ := store.Inspect(context.Background(), k); len(snap.Leases) != 0 {
				t.Errorf("key %s after the canceled acquire: %+v, want free", k, snap.Leases)
			}
		}
	})
}

// TestMultiLockAcquireTimeoutBoundsTheWhole: the acquire timeout bounds every key's wait
// together: a wait of 6s for a and then b, held past it, fails at 10s, not 6s+10s, with
// ErrNotAcquired naming b and the timeout (not a ctx error, as a Mutex's), and a freed.
func TestMultiLockAcquireTimeoutBoundsTheWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		a := mustAcquire(t, mustMutexOn(t, store, "a", primitives.WithTTL(time.Minute)))
		b := mustAcquire(t, mustMutexOn(t, store, "b", primitives.WithTTL(time.Minute)))
		go func() {
			time.Sleep(6 * time.Second)
			a.Release(context.Background())
		}()
		start := time.Now()
		_, err := mustMultiLock(t, store, []string{"a", "b"}, primitives.WithAcquireTimeout(10*time.Second)).Acquire(context.Background())
		if took := time.Since(start); took != 10*time.Second {
			t.Errorf("Acquire gave up after %v, want the 10s acquire timeout for the whole", took)
		}
		if !errors.Is(err, primitives.ErrNotAcquired) || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), "10s") {
			t.Errorf("Acquire past its timeout: %v, want ErrNotAcquired naming b and 10s", err)
		}
		// As a Mutex's: the caller's ctx had no deadline, so the error is not a ctx error.
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire past its acquire timeout: %v; is context.DeadlineExceeded, want only ErrNotAcquired", err)
		}
		synctest.Wait()
		if snap, _ := store.Inspect(context.Background(), "a"); len(snap.Leases) != 0 {
			t.Errorf("key a after the timeout: %+v, want free", snap.Leases)
		}
		b.Release(context.Background())
	})
}

// TestMultiLocksUnderOneHolderIDShareTheirLeases: WithHolder names one holder on every key, and
// two acquires under one holder id share one lease (as with a Mutex): a second MultiLock under
// the same id re-enters the keys, while one under another id is refused.
func TestMultiLocksUnderOneHolderIDShareTheirLeases(t *testing.T) {
	store := memory.New()
	keys := []string{"a", "b"}
	first, err := mustMultiLock(t, store, keys, primitives.WithHolder("w")).TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(t.Context())
	for _, l := range first.Leases() {
		if l.Holder() != "w" {
			t.Errorf("lease on %s held by %q, want w", l.Key(), l.Holder())
		}
	}
	if _, err := mustMultiLock(t, store, keys, primitives.WithHolder("v")).TryAcquire(t.Context()); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Errorf("TryAcquire under another holder id: %v, want ErrNotAcquired", err)
	}
	second, err := mustMultiLock(t, store, []string{"b", "a"}, primitives.WithHolder("w")).TryAcquire(t.Context())
	if err != nil {
		t.Fatalf("TryAcquire under the same holder id: %v, want the shared leases", err)
	}
	defer second.Release(t.Context())
	for i, l := range second.Leases() {
		if want := first.Leases()[1-i]; l.Fence() != want.Fence() {
			t.Errorf("re-entered lease on %s: fence %d, want the held one's %d", l.Key(), l.Fence(), want.Fence())
		}
	}
}

// TestMultiLockOverAThousandKeys: a MultiLock on 1000 keys refuses one named twice and, with one
// key busy, holds none of the others; its messages name a few keys, not all 1000.
func TestMultiLockOverAThousandKeys(t *testing.T) {
	store := memory.New()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%04d-%s", i, strings.Repeat("x", 60))
	}
	_, err := primitives.NewMultiLock(store, append(slicesClone(keys), keys[500]))
	if !errors.Is(err, primitives.ErrInvalid) || !strings.Contains(err.Error(), keys[500]) || len(err.Error()) > 1000 {
		t.Errorf("NewMultiLock with a key twice among 1001: %d bytes: %.300v; want ErrInvalid naming it, under 1000 bytes", len(err.Error()), err)
	}
	busy := mustAcquire(t, mustMutexOn(t, store, keys[999]))
	defer busy.Release(t.Context())
	ml := mustMultiLock(t, store, keys)
	_, err = ml.TryAcquire(t.Context())
	if !errors.Is(err, primitives.ErrNotAcquired) || !strings.Contains(err.Error(), keys[999]) || len(err.Error()) > 1000 {
		t.Errorf("TryAcquire of 1000 keys, the last busy: %d bytes: %.300v; want ErrNotAcquired naming it, under 1000 bytes", len(err.Error()), err)
	}
	for _, k := range keys[:999] {
		if snap, _ := store.Inspect(t.Context(), k); len(snap.Leases) != 0 {
			t.Fatalf("key %s after the refused TryAcquire: %+v, want free", k, snap.Leases)
		}
	}
	busy.Release(t.Context())
	ms, err := ml.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// TestMultiLocksOverLookAlikeKeysNeverDeadlock: keys that are prefixes of each other, differ by a
// NUL byte, or are one character composed and decomposed are distinct keys in one byte order:
// MultiLocks naming them in every order contend without deadlock or two holders.
func TestMultiLocksOverLookAlikeKeysNeverDeadlock(t *testing.T) {
	store := memory.New()
	all := []string{"a", "a\x00", "ab", "\u00e9", "e\u0301", "\xff"}
	occ := map[string]*conformance.Occupancy{}
	for _, k := range all {
		occ[k] = conformance.NewOccupancy(1)
	}
	sets := [][]string{all, {all[5], all[4], all[3], all[2], all[1], all[0]}, {all[1], all[0], all[4]}, {all[3], all[4], all[2]}}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, keys := range sets {
		ml := mustMultiLock(t, store, keys, primitives.WithAcquireTimeout(time.Minute))
		wg.Go(func() {
			for range 8 {
				ms, err := ml.Acquire(ctx)
				if err != nil {
					t.Errorf("Acquire %q: %v", keys, err)
					return
				}
				var leave []func()
				for _, k := range keys {
					leave = append(leave, occ[k].Enter(1))
				}
				runtime.Gosched()
				for _, f := range leave {
					f()
				}
				if err := ms.Release(ctx); err != nil {
					t.Errorf("Release %q: %v", keys, err)
				}
			}
		})
	}
	wg.Wait()
	for k, o := range occ {
		if v := o.Violations(); len(v) > 0 {
			t.Errorf("key %q had two holders: %v", k, v)
		}
	}
}
