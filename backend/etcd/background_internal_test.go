package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
)

// TestLeaveOwedOnceTheBackgroundEndedHoldsUpNoTry: an operation in flight when the Store's
// background work ended (the Store closed, or its client) fails and owes a leave that can no
// longer run. The holder's next try and an Inspect of the key, also in flight, must not wait
// for that leave until their contexts end.
func TestLeaveOwedOnceTheBackgroundEndedHoldsUpNoTry(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"store closed", "client closed"} {
		t.Run(end, func(t *testing.T) {
			c := etcdtest.Shared(t).Client(t)
			s, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if end == "store closed" {
				s.Close()
			} else {
				c.Close()
			}
			key := fmt.Sprint(t.Name(), rand.Int64())
			s.leaveInBackground(key, "h", true) // a try with a Wait failed after the end
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			if err := s.leaves.AwaitHolder(ctx, key, "h"); err != nil {
				t.Errorf("the holder's next try waited for a leave that never runs: %v", err)
			}
			if err := s.leaves.AwaitKey(ctx, key); err != nil {
				t.Errorf("Inspect waited for a leave that never runs: %v", err)
			}
		})
	}
}

// TestWaiterEnrolledAsTheStoreClosesIsWoken: a Register in flight when the Store closes gets
// the key's watch before Close stops it and enrolls its waiter after, on a refusal that says
// the line would not serve it. Nothing would wake that waiter: its caller, trusting a reliable
// waiter, would wait for the leases in its way to end before it tried again and heard of the
// Close. It must start woken.
func TestWaiterEnrolledAsTheStoreClosesIsWoken(t *testing.T) {
	t.Parallel()
	s, err := New(etcdtest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	key := fmt.Sprint(t.Name(), rand.Int64())
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	r := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, r); err != nil || res.Granted {
		t.Fatalf("Acquire(w): %+v, %v; want refused, waiting", res, err)
	}
	ref, known := s.refusals.take(refusalID(key, "w"))
	if !known {
		t.Fatal("the refusal was not kept for Register")
	}
	kw, err := s.watchKey(ctx, key, ref.st) // Register's first step, before Close
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	w := kw.enroll("w", ref, known) // and its second, after
	defer w.Close()
	select {
	case <-w.C():
	case <-time.After(2 * time.Second):
		t.Fatal("a waiter enrolled on the watch Close stopped was not woken")
	}
}

// TestLeaseDiscardedOnceTheBackgroundEndedIsNeverASpare: a try whose grant's transaction has no
// known outcome ends when the Store's client has closed, so the revoke of its etcd lease cannot
// be sent. The lease may carry that grant: a release of it later must not keep it as a spare.
func TestLeaseDiscardedOnceTheBackgroundEndedIsNeverASpare(t *testing.T) {
	t.Parallel()
	c := etcdtest.Shared(t).Client(t)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g, err := c.Grant(t.Context(), 5)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	l := leases{own: g.ID, ownSecs: 5}
	s.discard(l)
	s.recycle(l.spares()...)
	if id, ok := s.spares.take(5); ok {
		t.Errorf("lease %x, discarded but never revoked, was kept as a spare", id)
	}
}

// TestWaiterEnrolledAsTheClientClosesIsWoken: as TestWaiterEnrolledAsTheStoreClosesIsWoken,
// but the Store's client closes, after the wake its session's end gives: the watch hears of
// nothing any more, and the waiter must start woken.
func TestWaiterEnrolledAsTheClientClosesIsWoken(t *testing.T) {
	t.Parallel()
	c := etcdtest.Shared(t).Client(t)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	key := fmt.Sprint(t.Name(), rand.Int64())
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	r := core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, r); err != nil || res.Granted {
		t.Fatalf("Acquire(w): %+v, %v; want refused, waiting", res, err)
	}
	ref, known := s.refusals.take(refusalID(key, "w"))
	if !known {
		t.Fatal("the refusal was not kept for Register")
	}
	kw, err := s.watchKey(ctx, key, ref.st)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.loops.Wait() // the session's renewal has ended, and woken the waiters then enrolled
	w := kw.enroll("w", ref, known)
	defer w.Close()
	select {
	case <-w.C():
	case <-time.After(2 * time.Second):
		t.Fatal("a waiter enrolled once the client closed was not woken")
	}
}
