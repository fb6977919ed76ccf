package rediscore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// Tests of leave.go and leave.lua: a leave that names a try keeps that try out, and keeps the
// key's lease hash only as long as its record needs; a leave of a holder id must not drop a
// grant a waiter of that id was handed.

// TestLeaveThatOvertookItsTryKeepsItOut: a leave naming a try that has not arrived keeps that
// try from taking a place or a grant, whether or not the line lives, for as long as the leave
// said; another try of the same holder is served as usual.
func TestLeaveThatOvertookItsTryKeepsItOut(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const key = "overtaken"
	acq := func(holder, try string, wait time.Duration) []any {
		return asArray(srcAcquire, script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, time.Minute, wait, false, try, "")...))
	}
	script(t, c, srcLeave, key, "w", 0, "t1", 60000)
	if r := acq("w", "t1", time.Minute); r[0].(int64) != 0 {
		t.Fatalf("the overtaken try on a free key = %v; want refused", r)
	}
	if n := lineLen(t, srv.Addr, key); n != 0 {
		t.Fatalf("the overtaken try took a place")
	}
	if r := acq("a", "", 0); r[0].(int64) != 1 {
		t.Fatalf("a: %v", r)
	}
	script(t, c, srcLeave, key, "w", 0, "t2", 60000)
	acq("x", "tx", time.Minute) // the line lives
	if r := acq("w", "t2", time.Minute); r[0].(int64) != 0 {
		t.Fatalf("the overtaken try = %v; want refused", r)
	}
	if r := acq("w", "t1", time.Minute); r[0].(int64) != 0 {
		t.Fatalf("the first overtaken try again = %v; want refused", r)
	}
	if n := lineLen(t, srv.Addr, key); n != 1 {
		t.Fatalf("%d places, want x's alone", n)
	}
	if r := acq("w", "t3", time.Minute); r[0].(int64) != 0 || lineLen(t, srv.Addr, key) != 2 {
		t.Fatalf("another try of w = %v, line %d; want refused with a place behind x", r, lineLen(t, srv.Addr, key))
	}
	script(t, c, srcRelease, key, "a", 0)
	if h := holdersOf(t, c, key); len(h) != 1 || !strings.HasSuffix(h["x"], " q") {
		t.Errorf("holders %q; want x granted from the line", h)
	}
	_ = fmt.Sprint
}

// TestLeftTryOutlivesItsKeyGoingIdle: a waiter's leave names a try of it still on its way; then
// the key's last lease is released, which leaves nobody holding or waiting for it. The lease hash
// must stay while the left try's record lives (deleting it would delete the record): the late
// try then arrives and takes neither the free key nor a place. No call deletes the hash after
// that: it expires by its keep, as long again as what it recorded needed (here 2 s at most: the
// line's second, for a wait of half a second).
func TestLeftTryOutlivesItsKeyGoingIdle(t *testing.T) {
	testenv.SkipShort(t, "waits for the hash to expire by the server clock")
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const wait, ttl = 500 * time.Millisecond, 2 * time.Second
	var key string
	acq := func(holder, try string, wait time.Duration) []any {
		return asArray(srcAcquire, script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, ttl, wait, false, try, "")...))
	}
	// The checks between the leave and the late try hold only while the leave's hold lasts: on
	// a machine stalled for longer, start over once on a fresh key with twice the hold (the
	// line's second still bounds the keep).
	for hold := 400 * time.Millisecond; ; hold *= 2 {
		key = fmt.Sprint("idle-left-", hold)
		a := acq("a", "", 0)
		if a[0].(int64) != 1 {
			t.Fatalf("a: %v", a)
		}
		if r := acq("w", "t0", wait); r[0].(int64) != 0 {
			t.Fatalf("w's first try = %v; want refused with a place", r)
		}
		left := time.Now()
		script(t, c, srcLeave, key, "w", a[1], "t1", hold.Milliseconds())
		if r := asArray(srcRelease, script(t, c, srcRelease, key, "a", a[1])); r[0].(int64) != 1 || len(r) != 1 {
			t.Fatalf("release = %v; want 1 permit freed and nobody granted", r)
		}
		gone := len(keysMatching(t, c, key)) == 0
		var late []any
		if !gone {
			late = acq("w", "t1", wait)
		}
		if stalled := time.Since(left) >= hold; stalled && hold < 800*time.Millisecond {
			t.Logf("the checks took longer than the hold of %v; again with %v", hold, 2*hold)
			continue
		}
		if gone {
			t.Fatal("the idle key's hash went with the left try's record")
		}
		if late[0].(int64) != 0 {
			t.Fatalf("the left try, arriving late on the free key = %v; want refused", late)
		}
		break
	}
	if n := lineLen(t, srv.Addr, key); n != 0 {
		t.Fatalf("the left try took a place")
	}
	if h := holdersOf(t, c, key); len(h) != 0 {
		t.Fatalf("holders %q after the left try; want none", h)
	}
	if p := pttl(t, c, key, 0); p > 2*ttl {
		t.Errorf("lease hash PTTL %v, want at most %v", p, 2*ttl)
	}
	poll.Until(t, "the key's hash to expire", func() bool { return len(keysMatching(t, c, key)) == 0 })
	if r := acq("w", "t1", 0); r[0].(int64) != 1 {
		t.Errorf("a try of that id once the hold has passed = %v; want granted", r)
	}
}

// TestLeftTryKeepsAReleasedKeyOnlyAsLongAsItNeeds: a waiter behind an hour's lease gives up with
// a try of it on its way (its leave names the try, for a hold of 400 ms); then the holder
// releases. The key is held and waited for by nobody, so its lease hash lives on for the left
// try's record alone: as long again as that needs (a second at least), not as long as the
// hour's lease and the line had it kept.
func TestLeftTryKeepsAReleasedKeyOnlyAsLongAsItNeeds(t *testing.T) {
	testenv.SkipShort(t, "waits for the hash to expire by the server clock")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			const key = "left-released"
			const hold = 400 * time.Millisecond
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Hour, Wait: wait}
			}
			a := mustAcquire(t, s, req("a", 0), true)
			mustAcquire(t, s, req("w", time.Hour), false)
			left := time.Now()
			script(t, c, srcLeave, key, "w", a.Fence, "t1", hold.Milliseconds())
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: a.Fence}); !ok || err != nil {
				t.Fatalf("Release = %v, %v", ok, err)
			}
			// Gone already is right only once the hold has passed (a stalled machine's reads).
			if p, most := pttl(t, c, key, 0), hold+time.Second; p > most || p <= 0 && time.Since(left) < hold {
				t.Errorf("after the last release, with a left try: lease hash PTTL %v, want at most %v, and at least the hold", p, most)
			}
			poll.Until(t, "the key's hash to expire", func() bool { return len(keysMatching(t, c, key)) == 0 })
		})
	}
}

// The grant taken from the line's message without a round trip (takeGrant): the
// server entry stays marked untaken (" q") until the lease's first Extend or Release, and the
// leave script drops an untaken grant above the leave's floor. A leave sent for the same holder
// id (a WithHolder id shared by two acquires: a try of it that fails, a second waiter of it
// that gives up, in this Store or another) must not drop a grant a waiter was handed: the
// waiter would believe it holds a lease the line passed on to the next in line. So a store
// takes a grant without the round trip only for an id the request says is Unshared, and these
// requests, whose ids are shared, take theirs with the round trip, which marks the lease taken.

// heardGrant sets up key with holder "b" waiting on other, enrolled, and the line's grant to it
// heard (its waiter woken), with "c" in line behind it on s. It returns b's request and waiter.
func heardGrant(t *testing.T, s, other core.Store, key string) (core.AcquireRequest, core.Wake) {
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
	poll.Until(t, "b's waiter to be reliable", w.Reliable)
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
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
