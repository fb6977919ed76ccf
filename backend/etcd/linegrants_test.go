package etcd_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestOneReleaseGrantsEveryHeadThatFitsEachWithItsOwnFence: a release that frees room for
// several waiters grants them all in its one transaction; each grant has a fence of its own,
// kept when its holder takes it, and the holder's release with that fence ends it.
func TestOneReleaseGrantsEveryHeadThatFitsEachWithItsOwnFence(t *testing.T) {
	t.Parallel()
	st, key := newStore(t), uniqueKey(t)
	ctx := t.Context()
	req := func(holder string, permits int) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: permits, Limit: 3, TTL: time.Minute, Wait: time.Minute}
	}
	if res, err := st.Acquire(ctx, req("a", 3)); err != nil || !res.Granted {
		t.Fatalf("Acquire(a, 3 of 3) = %+v, %v; want granted", res, err)
	}
	var ws []core.Wake
	for _, h := range []string{"b", "c", "d"} {
		if res, err := st.Acquire(ctx, req(h, 1)); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want refused, in line", h, res, err)
		}
		w, err := st.Register(ctx, req(h, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	snap, err := st.Inspect(ctx, key)
	if err != nil || len(snap.Leases) != 1 {
		t.Fatalf("Inspect = %+v, %v; want a's lease", snap, err)
	}
	if ok, err := st.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: snap.Leases[0].Fence}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	// All three fit: the release granted them all, untaken, each with its own fence.
	granted := poll.For(t, "the line's three grants", func() (core.Snapshot, bool) {
		s, err := st.Inspect(ctx, key)
		return s, err == nil && len(s.Leases) == 3 && len(s.Waiters) == 0
	})
	fences := map[string]uint64{}
	for i, l := range granted.Leases {
		if i > 0 && l.Fence <= granted.Leases[i-1].Fence {
			t.Errorf("grants of one release share or disorder fences: %+v", granted.Leases)
		}
		fences[l.Holder] = l.Fence
	}
	for i, h := range []string{"b", "c", "d"} {
		select {
		case <-ws[i].C():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s's waiter was not woken by its grant", h)
		}
		res, err := st.Acquire(ctx, req(h, 1))
		if err != nil || !res.Granted || res.Fence != fences[h] {
			t.Fatalf("Acquire(%s) taking its grant = %+v, %v; want granted with the fence Inspect showed, %d", h, res, err, fences[h])
		}
	}
	for _, h := range []string{"c", "d", "b"} {
		if ok, err := st.Release(ctx, core.ReleaseRequest{Key: key, Holder: h, Fence: fences[h]}); err != nil || !ok {
			t.Errorf("Release(%s, fence %d) of its taken grant = %v, %v; want true", h, fences[h], ok, err)
		}
	}
	if s, err := st.Inspect(ctx, key); err != nil || len(s.Leases) != 0 {
		t.Errorf("after every release: %+v, %v; want nothing held", s, err)
	}
}
