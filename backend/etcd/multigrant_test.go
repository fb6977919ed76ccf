package etcd_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fencesOf returns the fences of key's leases by holder, as Inspect reports them.
func fencesOf(t *testing.T, s core.Store, key string) map[string]uint64 {
	t.Helper()
	snap, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	fs := map[string]uint64{}
	for _, l := range snap.Leases {
		fs[l.Holder] = l.Fence
	}
	return fs
}

// The grants one release makes share its revision and differ in their index: each keeps its
// fence when taken, extended with a new TTL (taken or not) or asked for again, and a Release
// naming the revision with another grant's index (or any index no grant has) ends nothing,
// whether or not anyone waits on the key.
func TestGrantsOfOneReleaseKeepTheirOwnFences(t *testing.T) {
	t.Parallel()
	st, key := newStore(t), uniqueKey(t)
	ctx := t.Context()
	req := func(holder string, permits int) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: permits, Limit: 3, TTL: time.Minute, Wait: time.Minute}
	}
	if res, err := st.Acquire(ctx, req("a", 3)); err != nil || !res.Granted {
		t.Fatalf("Acquire(a) = %+v, %v", res, err)
	}
	for _, h := range []string{"b", "c", "d"} {
		if res, err := st.Acquire(ctx, req(h, 1)); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want refused, in line", h, res, err)
		}
		w, err := st.Register(ctx, req(h, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
	}
	if ok, err := st.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	fences := poll.For(t, "the line's three grants", func() (map[string]uint64, bool) {
		fs := fencesOf(t, st, key)
		return fs, len(fs) == 3
	})
	rev := fences["b"] >> 8
	if fences["c"]>>8 != rev || fences["d"]>>8 != rev || !(fences["b"] < fences["c"] && fences["c"] < fences["d"]) {
		t.Fatalf("fences of one release's grants = %v; want one revision, indexes in the line's order", fences)
	}
	wrong := func(when string) {
		t.Helper()
		for _, h := range []string{"b", "c", "d"} {
			for _, idx := range []uint64{0, 1, 2, 3, 254, 255} {
				f := rev<<8 | idx
				if f == fences[h] {
					continue
				}
				if ok, err := st.Release(ctx, core.ReleaseRequest{Key: key, Holder: h, Fence: f}); err != nil || ok {
					t.Fatalf("%s: Release(%s, fence %#x; its own is %#x) = %v, %v; want false", when, h, f, fences[h], ok, err)
				}
			}
		}
		if got := fencesOf(t, st, key); !equalFences(got, fences) {
			t.Fatalf("%s: after releases with wrong fences: %v; want %v, unchanged", when, got, fences)
		}
	}
	wrong("untaken, nobody waiting")

	// b takes its grant, then extends it with a new TTL and asks for it again; c extends its
	// grant untaken with a new TTL, then takes it; d extends its grant untaken with its TTL.
	if res, err := st.Acquire(ctx, req("b", 1)); err != nil || !res.Granted || res.Fence != fences["b"] {
		t.Fatalf("Acquire(b) taking its grant = %+v, %v; want fence %#x", res, err, fences["b"])
	}
	if res, err := st.Extend(ctx, core.ExtendRequest{Key: key, Holder: "b", TTL: 2 * time.Minute}); err != nil || res.Fence != fences["b"] {
		t.Fatalf("Extend(b, new TTL) = %+v, %v; want fence %#x", res, err, fences["b"])
	}
	if res, err := st.Acquire(ctx, req("b", 1)); err != nil || !res.Granted || res.Fence != fences["b"] {
		t.Fatalf("Acquire(b) again = %+v, %v; want fence %#x", res, err, fences["b"])
	}
	if res, err := st.Extend(ctx, core.ExtendRequest{Key: key, Holder: "c", TTL: 2 * time.Minute}); err != nil || res.Fence != fences["c"] {
		t.Fatalf("Extend(c, untaken, new TTL) = %+v, %v; want fence %#x", res, err, fences["c"])
	}
	if res, err := st.Acquire(ctx, req("c", 1)); err != nil || !res.Granted || res.Fence != fences["c"] {
		t.Fatalf("Acquire(c) after its Extend = %+v, %v; want fence %#x", res, err, fences["c"])
	}
	if res, err := st.Extend(ctx, core.ExtendRequest{Key: key, Holder: "d", TTL: time.Minute}); err != nil || res.Fence != fences["d"] {
		t.Fatalf("Extend(d, untaken) = %+v, %v; want fence %#x", res, err, fences["d"])
	}
	if got := fencesOf(t, st, key); !equalFences(got, fences) {
		t.Fatalf("after takes, extends and re-acquires: %v; want %v", got, fences)
	}
	wrong("taken and extended, nobody waiting")

	// With a waiter in line, Release takes its slower path: still nothing ends.
	if res, err := st.Acquire(ctx, req("e", 1)); err != nil || res.Granted {
		t.Fatalf("Acquire(e) = %+v, %v; want refused, in line", res, err)
	}
	we, err := st.Register(ctx, req("e", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer we.Close()
	wrong("with a waiter")
	for _, h := range []string{"c", "b", "d"} {
		if ok, err := st.Release(ctx, core.ReleaseRequest{Key: key, Holder: h, Fence: fences[h]}); err != nil || !ok {
			t.Fatalf("Release(%s, its fence) = %v, %v; want true", h, ok, err)
		}
	}
	grantedWhenWoken(t, st, we, req("e", 1), 30*time.Second)
	if f := fencesOf(t, st, key)["e"]; f <= fences["d"] {
		t.Fatalf("e's fence %#x after the three grants' %v; want above them", f, fences)
	}
}

func equalFences(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for h, f := range a {
		if b[h] != f {
			return false
		}
	}
	return true
}

// A release that frees room for 40 waiters, spread over several Stores, serves them all (the
// first 32 in its transaction, within etcd's 128 operations, the rest as each becomes the
// head), in the line's order of fences.
func TestReleaseServesFortyWaitersThatAllFit(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	stores := []*etcd.Store{newStore(t), newStore(t), newStore(t), newStore(t)}
	ctx := t.Context()
	const n = 40
	req := func(holder string, permits int) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: permits, Limit: n, TTL: time.Minute, Wait: time.Minute}
	}
	if res, err := stores[0].Acquire(ctx, req("a", n)); err != nil || !res.Granted {
		t.Fatalf("Acquire(a) = %+v, %v", res, err)
	}
	holders := make([]string, n)
	waiters := make([]core.Wake, n)
	for i := range n {
		holders[i] = fmt.Sprintf("w%02d", i)
		s := stores[i%len(stores)]
		if res, err := s.Acquire(ctx, req(holders[i], 1)); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want refused, in line", holders[i], res, err)
		}
		w, err := s.Register(ctx, req(holders[i], 1))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		waiters[i] = w
	}
	if got := lineOf(t, stores[0], key); !slices.Equal(got, holders) {
		t.Fatalf("line = %v; want %v", got, holders)
	}
	if ok, err := stores[0].Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	if snap, err := stores[0].Inspect(ctx, key); err != nil || len(snap.Leases) < 32 {
		t.Fatalf("right after the release: %d leases, %v; want the 32 its transaction granted", len(snap.Leases), err)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { grantedWhenWoken(t, stores[i%len(stores)], waiters[i], req(holders[i], 1), time.Minute) })
	}
	wg.Wait()
	fs := fencesOf(t, stores[0], key)
	for i := 1; i < n; i++ {
		if fs[holders[i]] <= fs[holders[i-1]] {
			t.Fatalf("fence of %s %#x not above %s's %#x: %v", holders[i], fs[holders[i]], holders[i-1], fs[holders[i-1]], fs)
		}
	}
}

// A lease whose index is 255, the largest, is released by its fence and by no other.
func TestReleaseComparesTheLargestIndex(t *testing.T) {
	t.Parallel()
	st, key := newStore(t), uniqueKey(t)
	c := etcdClient(t)
	ctx := t.Context()
	record := func(idx byte) string {
		b := []byte{idx, 2, 0} // the index, the format's version, no flags
		for _, v := range []uint64{1, 2, uint64(time.Minute / time.Millisecond), 0, 0, 0} {
			b = binary.AppendUvarint(b, v)
		}
		return string(b)
	}
	var ids [2]clientv3.LeaseID // each record on an etcd lease of its own, as a grant's is
	for i := range ids {
		g, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Revoke(context.Background(), g.ID)
		ids[i] = g.ID
	}
	base := etcd.DefaultPrefix + key + "/l/"
	resp, err := c.Txn(ctx).Then(clientv3.OpPut(base+"x", record(255), clientv3.WithLease(ids[0])), clientv3.OpPut(base+"y", record(254), clientv3.WithLease(ids[1]))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	rev := uint64(resp.Header.Revision)
	if fs := fencesOf(t, st, key); fs["x"] != rev<<8|255 || fs["y"] != rev<<8|254 {
		t.Fatalf("fences = %v; want x %#x, y %#x", fs, rev<<8|255, rev<<8|254)
	}
	for _, r := range []core.ReleaseRequest{{Holder: "x", Fence: rev<<8 | 254}, {Holder: "x", Fence: rev << 8}, {Holder: "y", Fence: rev<<8 | 255}, {Holder: "x", Fence: (rev+1)<<8 | 255}} {
		r.Key = key
		if ok, err := st.Release(ctx, r); err != nil || ok {
			t.Fatalf("Release(%s, %#x) = %v, %v; want false", r.Holder, r.Fence, ok, err)
		}
	}
	for _, r := range []core.ReleaseRequest{{Holder: "x", Fence: rev<<8 | 255}, {Holder: "y", Fence: rev<<8 | 254}} {
		r.Key = key
		if ok, err := st.Release(ctx, r); err != nil || !ok {
			t.Fatalf("Release(%s, %#x) = %v, %v; want true", r.Holder, r.Fence, ok, err)
		}
	}
}
