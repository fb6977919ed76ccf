package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// req is a request of holder for permits of limit on key, with a minute's TTL.
func req(key, holder string, permits, limit int) core.AcquireRequest {
	return core.AcquireRequest{Key: key, Holder: holder, Permits: permits, Limit: limit, TTL: time.Minute}
}

func mustAcquire(t *testing.T, s core.Store, r core.AcquireRequest) core.AcquireResult {
	t.Helper()
	res, err := s.Acquire(context.Background(), r)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire(%s) = %+v, %v; want a grant", r.Holder, res, err)
	}
	return res
}

// mustWait makes r's holder wait in line: a refused Acquire with a Wait, then Register.
func mustWait(t *testing.T, s *etcd.Store, r core.AcquireRequest) core.Wake {
	t.Helper()
	r.Wait = time.Minute
	if res, err := s.Acquire(context.Background(), r); err != nil || res.Granted {
		t.Fatalf("Acquire(%s) = %+v, %v; want a refusal", r.Holder, res, err)
	}
	w, err := s.Register(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func waitWoken(t *testing.T, w core.Wake) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not woken")
	}
}

// inLine reports whether holder is listed as waiting, or holding, on key.
func holds(t *testing.T, s core.Store, key, holder string) bool {
	t.Helper()
	snap, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range snap.Leases {
		if l.Holder == holder {
			return true
		}
	}
	return false
}

// A grant the line made to a waiter whose process then died (its Store's session lease ends)
// holds nothing up for the grant's TTL: it goes with the session, as the waiter's place would.
func TestUntakenGrantOfADeadWaiterIsPassedOn(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	srv := etcdtest.Shared(t)
	holder, other := storeOn(t, srv), storeOn(t, srv)
	c := srv.Client(t)
	// A session of 3s: with 1s, a loaded machine's stalls ended it before the release, so the
	// waiter was no longer in line to be granted.
	dying, err := etcd.New(c, etcd.WithSessionTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dying.Close() })

	h := mustAcquire(t, holder, req(key, "h", 1, 1))
	wr := req(key, "w", 1, 1)
	wr.Wait = time.Minute
	if res, err := dying.Acquire(context.Background(), wr); err != nil || res.Granted {
		t.Fatalf("Acquire(w) = %+v, %v; want a refusal", res, err)
	}
	if ok, err := holder.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	if !holds(t, other, key, "w") {
		t.Fatal("the release did not grant the waiter in line")
	}
	c.Close() // the waiter's process dies before it takes the grant: its session lease ends
	poll.Within(t, 10*time.Second, "the dead waiter's grant passed on", func() (core.AcquireResult, bool) {
		res, err := other.Acquire(context.Background(), req(key, "o", 1, 1))
		return res, err == nil && res.Granted
	})
}

// A holder whose grant from the line was made under one limit, asking with another, is refused
// with a limit mismatch and changes nothing — as when it asks with another limit for a lease it
// took.
func TestTakingAGrantOfTheLineWithAnotherLimitIsAMismatch(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	a, b := newStore(t), newStore(t)
	h := mustAcquire(t, a, req(key, "h", 2, 2))
	w := mustWait(t, b, req(key, "w", 1, 2))
	if ok, err := a.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	waitWoken(t, w)
	res, err := b.Acquire(context.Background(), req(key, "w", 1, 3))
	var lm *core.LimitMismatchError
	if !errors.As(err, &lm) || lm.Held != 2 || lm.Requested != 3 {
		t.Fatalf("Acquire(w, limit 3) of a grant made under limit 2 = %+v, %v; want a limit mismatch 2/3", res, err)
	}
	snap, err := a.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Limit != 2 || len(snap.Leases) != 1 || snap.Leases[0].Holder != "w" {
		t.Fatalf("after the mismatch, Inspect = %+v; want w's grant under limit 2", snap)
	}
}

// A request refused with an error that says it changed nothing (a limit mismatch, permits other
// than those held) leaves the grant its holder has from the line, even when it asked to wait.
func TestRequestRefusedAsInvalidKeepsTheGrantOfTheLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		permits, limit int
		want           error
	}{
		{"LimitMismatch", 1, 3, core.ErrLimitMismatch},
		{"OtherPermits", 2, 2, core.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := uniqueKey(t)
			a, b := newStore(t), newStore(t)
			h := mustAcquire(t, a, req(key, "h", 2, 2))
			w := mustWait(t, b, req(key, "w", 1, 2))
			if ok, err := a.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
				t.Fatalf("Release(h) = %v, %v", ok, err)
			}
			waitWoken(t, w)
			bad := req(key, "w", tc.permits, tc.limit)
			bad.Wait = time.Minute
			if _, err := b.Acquire(context.Background(), bad); !errors.Is(err, tc.want) {
				t.Fatalf("Acquire(w, %d of %d) = %v; want %v", tc.permits, tc.limit, err, tc.want)
			}
			// The Store's background work, if any, is done when Inspect answers.
			if !holds(t, b, key, "w") {
				t.Fatal("the refused request gave back the holder's grant from the line")
			}
			mustAcquire(t, b, req(key, "w", 1, 2))
		})
	}
}

// A request refused with a Wait holds its place that long, and no longer: a caller that neither
// registers nor asks again (its Wait over) does not hold up the line, and a release does not
// grant it a lease nobody will take.
func TestPlaceWhoseWaitEndedHoldsUpNobody(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	a, b, c := newStore(t), newStore(t), newStore(t)
	h := mustAcquire(t, a, req(key, "h", 1, 1))
	wr := req(key, "w", 1, 1)
	wr.Wait = time.Second
	if res, err := b.Acquire(context.Background(), wr); err != nil || res.Granted {
		t.Fatalf("Acquire(w) = %+v, %v; want a refusal", res, err)
	}
	time.Sleep(wr.Wait) // the point: the wait is over, and nothing happened
	if ok, err := a.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	poll.Within(t, 10*time.Second, "the key free for a newcomer", func() (core.AcquireResult, bool) {
		res, err := c.Acquire(context.Background(), req(key, "c", 1, 1))
		return res, err == nil && res.Granted
	})
	if l := lineOf(t, b, key); len(l) != 0 {
		t.Fatalf("line %v; want nobody waiting", l)
	}
}
