package etcd_test

import (
	"errors"
	"math"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

func TestFencedWritesOnlyAtTheHighestFenceSoFar(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Shared(t)
	st, c := storeOn(t, srv), srv.Client(t)
	ctx, res, data := t.Context(), uniqueKey(t), "data/"+uniqueKey(t)
	write := func(fence uint64, v string) error {
		_, err := st.Fenced(ctx, res, fence, clientv3.OpPut(data, v))
		return err
	}
	read := func() string {
		r, err := c.Get(ctx, data)
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("Get(%q) = %v, %v", data, r, err)
		}
		return string(r.Kvs[0].Value)
	}
	if err := write(10, "ten"); err != nil {
		t.Fatalf("the first fenced write: %v", err)
	}
	if err := write(10, "ten again"); err != nil {
		t.Fatalf("a write at the same fence: %v, want it accepted", err)
	}
	if err := write(20, "twenty"); err != nil {
		t.Fatalf("a write at a higher fence: %v", err)
	}
	err := write(15, "fifteen")
	if !errors.Is(err, core.ErrStaleFence) || !errors.Is(err, core.ErrLost) {
		t.Fatalf("a write at a lower fence: %v, want ErrStaleFence and ErrLost", err)
	}
	if got := read(); got != "twenty" {
		t.Errorf("after the stale write, the data is %q, want %q: the refused write landed", got, "twenty")
	}
	for _, f := range []uint64{0, math.MaxInt64 + 1} {
		if err := write(f, "bad"); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("a write at fence %d: %v, want ErrInvalid", f, err)
		}
	}
}

// TestStaleHolderWriteIsRefusedAfterTheNextHoldersWrite: a holder whose lease expired and was
// granted on writes nothing with its old fence, once the next holder wrote with its own.
func TestStaleHolderWriteIsRefusedAfterTheNextHoldersWrite(t *testing.T) {
	testenv.SkipShort(t, "waits out a TTL of a second")
	t.Parallel()
	st, key := newStore(t), uniqueKey(t)
	ctx := t.Context()
	old, err := primitives.NewMutex(st, key, primitives.WithTTL(time.Second), primitives.WithoutRefresh())
	if err != nil {
		t.Fatal(err)
	}
	stale, err := old.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next, err := primitives.NewMutex(newStore(t), key, primitives.WithAcquireTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := next.Acquire(ctx) // waits out the first lease's TTL
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Release(ctx)
	if _, err := st.Fenced(ctx, key, fresh.Fence(), clientv3.OpPut("out/"+key, "fresh")); err != nil {
		t.Fatalf("the next holder's write: %v", err)
	}
	if _, err := st.Fenced(ctx, key, stale.Fence(), clientv3.OpPut("out/"+key, "stale")); !errors.Is(err, core.ErrStaleFence) {
		t.Fatalf("the stale holder's write (fence %d after %d): %v, want ErrStaleFence", stale.Fence(), fresh.Fence(), err)
	}
}

// TestFenceRecordsAreApartFromLocks: a lock on a key named like a fence record, and a fence
// record named like a lock, do not meet.
func TestFenceRecordsAreApartFromLocks(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	name := "%fence/" + uniqueKey(t)
	if _, err := st.Fenced(ctx, name, 5); err != nil {
		t.Fatal(err)
	}
	res, err := st.Acquire(ctx, core.AcquireRequest{Key: name, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
	if err != nil || !res.Granted {
		t.Fatalf("Acquire(%q) beside a fence record = %+v, %v; want granted", name, res, err)
	}
	if snap, err := st.Inspect(ctx, name); err != nil || len(snap.Leases) != 1 {
		t.Errorf("Inspect(%q) = %+v, %v; want its one lease", name, snap, err)
	}
	if st.FenceKey(name) == st.FenceKey("%fence") {
		t.Errorf("two resources share a fence record")
	}
}
