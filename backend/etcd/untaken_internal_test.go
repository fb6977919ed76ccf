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

// TestWaiterWhoseGrantEndsUntakenIsWokenAndAsksAgain: the line grants a live waiter (with a lock
// delay) that does not take its grant within its session TTL. The grant ends by itself and closes
// no permits (its lock delay begins only when taken); the waiter is woken, its place gone; the
// next in line is served; and the waiter, asking again, finds no grant on the Store's old copy and
// takes a place behind it.
func TestWaiterWhoseGrantEndsUntakenIsWokenAndAsksAgain(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Shared(t)
	prefix := uniquePrefix(t)
	open := func(opts ...Option) *Store {
		s, err := New(srv.Client(t), append(opts, WithPrefix(prefix))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	const sessionTTL = 2 * time.Second
	granter, slow, next := open(), open(WithSessionTTL(sessionTTL)), open()
	ctx := t.Context()
	req := func(holder string) core.AcquireRequest {
		return core.AcquireRequest{Key: "k", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	}
	wait := func(s *Store, r core.AcquireRequest) core.Wake {
		if res, err := s.Acquire(ctx, r); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want refused, waiting", r.Holder, res, err)
		}
		w, err := s.Register(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		return w
	}
	woken := func(w core.Wake, what string) {
		t.Helper()
		select {
		case <-w.C():
		case <-time.After(sessionTTL + 10*time.Second):
			t.Fatalf("%s: not woken", what)
		}
	}
	a := granted(t, granter, req("a"))
	wr := req("w")
	wr.LockDelay = time.Hour
	w := wait(slow, wr)
	y := wait(next, req("y"))
	select { // the wake of the Register itself, if any
	case <-w.C():
	default:
	}
	if ok, err := granter.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: a.Fence}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	woken(w, "w, granted by the line")
	if ls := leasesHeld(t, granter, "k"); len(ls) != 1 || ls[0].Holder != "w" {
		t.Fatalf("after the release: leases %+v; want the line's grant to w", ls)
	}
	within := sessionTTL + 1500*time.Millisecond + 2*time.Second // etcd's expiry, and slack
	poll.Within(t, within, "w's untaken grant ended", func() (core.Snapshot, bool) {
		snap, err := granter.Inspect(ctx, "k")
		return snap, err == nil && len(snap.Leases) == 0
	})
	if snap, err := granter.Inspect(ctx, "k"); err != nil || len(snap.Delayed) != 0 {
		t.Errorf("after w's untaken grant ended: %+v, %v; want no lock delay", snap, err)
	}
	woken(w, "w, its grant ended untaken")
	woken(y, "y, the line's next")
	if res, err := next.Acquire(ctx, req("y")); err != nil || !res.Granted {
		t.Fatalf("Acquire(y), next in line once w's grant ended: %+v, %v; want granted", res, err)
	}
	if res, err := slow.Acquire(ctx, wr); err != nil || res.Granted {
		t.Fatalf("Acquire(w) again once its grant ended: %+v, %v; want refused, waiting", res, err)
	}
	snap, err := granter.Inspect(ctx, "k")
	if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "y" || len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "w" {
		t.Errorf("once w asked again: %+v, %v; want y holding, w waiting", snap, err)
	}
}
