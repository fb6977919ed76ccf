package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// Review of the grant taken from the line's message without a round trip (takeGrant): the
// server entry stays marked untaken (" q") until the lease's first Extend or Release, and the
// leave script drops an untaken grant above the leave's floor. A leave sent for the same holder
// id (a WithHolder id shared by two acquires: a try of it that fails, a second waiter of it
// that gives up, in this Store or another) must not drop a grant a waiter was handed: the
// waiter would believe it holds a lease the line passed on to the next in line. So a store
// takes a grant without the round trip only for an id the request says is Unshared, and these
// requests, whose ids are shared, take theirs with the round trip, which marks the lease taken.

// heardGrant sets up key with holder "b" waiting on other, enrolled, and the line's grant to it
// heard (its waiter woken), with "c" in line behind it on s. It returns b's request and waiter.
func heardGrant(t *testing.T, s, other core.Store, key string) (core.AcquireRequest, core.Waiter) {
	t.Helper()
	ctx := context.Background()
	req := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
	mustAcquire(t, other, req, false)
	w, err := other.(core.Notifier).Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	pollUntil(t, w.Reliable)
	drain(w)
	mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "c", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}, false)
	if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter granted from the line was not woken")
	}
	return req, w
}

// holders returns the holders of key's leases, as the server has them.
func holders(t *testing.T, s core.Store, key string) []string {
	t.Helper()
	snap, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var hs []string
	for _, l := range snap.Leases {
		hs = append(hs, l.Holder)
	}
	return hs
}

// canceled returns a ctx that has ended.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestFailedTryOfSameHolderVoidsHeardGrant: after the line's grant to b was heard, a try of the
// same holder on the same Store that fails (its ctx ended) leaves the line, which passes b's
// untaken grant on to c. b's waiter must not then take that grant from the message.
func TestFailedTryOfSameHolderVoidsHeardGrant(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, other := mk(t, srv.Addr), mk(t, srv.Addr)
			req, _ := heardGrant(t, s, other, "void")
			again := req
			again.TTL = 2 * time.Minute // another acquire under the same id: not the refused request
			if _, err := other.Acquire(canceled(), again); err == nil {
				t.Fatal("Acquire with an ended ctx succeeded")
			}
			res, err := other.Acquire(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if hs := holders(t, s, "void"); res.Granted && (len(hs) != 1 || hs[0] != "b") {
				t.Fatalf("b was granted (fence %d, TTL %v) while the store's leases are %v", res.Fence, res.TTL, hs)
			}
		})
	}
}

// TestFailedTryOfSameHolderKeepsTakenGrant: a grant b took from the message is b's lease: a try
// of the same holder on the same Store that fails afterwards (its ctx ended, before it was
// sent) leaves the line, and must not pass b's lease on.
func TestFailedTryOfSameHolderKeepsTakenGrant(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, other := mk(t, srv.Addr), mk(t, srv.Addr)
			req, w := heardGrant(t, s, other, "keep")
			res, err := other.Acquire(context.Background(), req)
			if err != nil || !res.Granted || res.TTL != 0 {
				t.Fatalf("taking the grant heard of: %+v, %v; want it taken with the round trip (the id is shared)", res, err)
			}
			w.Close()
			if _, err := other.Acquire(canceled(), req); err == nil {
				t.Fatal("Acquire with an ended ctx succeeded")
			}
			if hs := holders(t, other, "keep"); len(hs) != 1 || hs[0] != "b" {
				t.Fatalf("b took its lease (fence %d), and after a failed try of its id the store's leases are %v", res.Fence, hs)
			}
		})
	}
}

// TestSecondWaiterOfSameHolderKeepsTakenGrant: a grant b took from the message is b's lease: a
// second waiter of the same holder, enrolled after the take (its refused try came before the
// grant) and closed, leaves the line, and must not pass b's lease on.
func TestSecondWaiterOfSameHolderKeepsTakenGrant(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, other := mk(t, srv.Addr), mk(t, srv.Addr)
			req, w := heardGrant(t, s, other, "second")
			res, err := other.Acquire(context.Background(), req)
			if err != nil || !res.Granted || res.TTL != 0 {
				t.Fatalf("taking the grant heard of: %+v, %v; want it taken with the round trip (the id is shared)", res, err)
			}
			w2, err := other.(core.Notifier).Register(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			w2.Close()
			if hs := holders(t, other, "second"); len(hs) != 1 || hs[0] != "b" {
				t.Fatalf("b took its lease (fence %d), and after a second waiter of its id closed the store's leases are %v", res.Fence, hs)
			}
		})
	}
}

// TestFailedTryInAnotherStoreKeepsTakenGrant: as TestFailedTryOfSameHolderKeepsTakenGrant, the
// failed try of the same holder id sent through another Store (process), which cannot know of
// the take: only the take's round trip, which marks the lease taken, keeps its leave (floor 0)
// from passing the lease on.
func TestFailedTryInAnotherStoreKeepsTakenGrant(t *testing.T) {
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s, other, third := mk(t, srv.Addr), mk(t, srv.Addr), mk(t, srv.Addr)
			req, w := heardGrant(t, s, other, "across")
			res, err := other.Acquire(context.Background(), req)
			if err != nil || !res.Granted || res.TTL != 0 {
				t.Fatalf("taking the grant heard of: %+v, %v; want it taken with the round trip (the id is shared)", res, err)
			}
			w.Close()
			if _, err := third.Acquire(canceled(), req); err == nil {
				t.Fatal("Acquire with an ended ctx succeeded")
			}
			if hs := holders(t, third, "across"); len(hs) != 1 || hs[0] != "b" {
				t.Fatalf("b took its lease (fence %d), and after a failed try of its id elsewhere the store's leases are %v", res.Fence, hs)
			}
		})
	}
}
