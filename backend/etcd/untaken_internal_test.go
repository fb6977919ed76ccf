package etcd

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestGrantNobodyTakesEndsWithinTheSessionTTL: a waiter gives up while its Store is busy on the
// key, so its leave cannot get through; the key is released and the line grants the waiter. Its
// Store lives on (its session renewed), and nobody takes the grant: it must end by itself within
// the waiter's session TTL (etcd's expiry adds up to 1.5 s), not hold the key for nobody while
// the waiter's Store lives.
func TestGrantNobodyTakesEndsWithinTheSessionTTL(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Shared(t)
	open := func(opts ...Option) *Store {
		s, err := New(srv.Client(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	const sessionTTL = 2 * time.Second
	granter, waiting := open(), open(WithSessionTTL(sessionTTL))
	ctx := t.Context()
	key := fmt.Sprint(t.Name(), rand.Int64()) // -count: not a run's before
	req := func(holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	}
	if res, err := granter.Acquire(ctx, req("a")); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	if res, err := waiting.Acquire(ctx, req("w")); err != nil || res.Granted {
		t.Fatalf("Acquire(w): %+v, %v; want refused, waiting", res, err)
	}
	wake, err := waiting.Register(ctx, req("w"))
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := waiting.locks.lock(ctx, key) // the Store busy on the key: the leave waits
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
	wake.Close()
	if ok, err := granter.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	snap, err := granter.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Leases) != 1 || snap.Leases[0].Holder != "w" {
		t.Fatalf("after the release: leases %+v; want the line's grant to w", snap.Leases)
	}
	within := sessionTTL + 1500*time.Millisecond + 2*time.Second // etcd's expiry, and slack
	poll.Within(t, within, "the key free of the grant nobody takes", func() (core.Snapshot, bool) {
		snap, err := granter.Inspect(ctx, key)
		return snap, err == nil && len(snap.Leases) == 0
	})
	if res, err := granter.Acquire(ctx, req("n")); err != nil || !res.Granted {
		t.Errorf("Acquire(n) once the grant ended: %+v, %v; want granted", res, err)
	}
}
