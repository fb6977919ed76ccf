package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// overtakingAcquireArgv is the acquire script's whole ARGV for a try of holder (one permit of
// limit, a minute's TTL, waiting wait) named try, which names the holder's leaves overtakes
// (space-separated), kept out for a minute.
func overtakingAcquireArgv(holder string, limit int, wait time.Duration, try, overtakes string) []any {
	return []any{holder, int64(60000), wait.Milliseconds(), try, "0", 1, limit, "", int64(0), int64(0), int64(0), overtakes, int64(60000)}
}

// TestOvertakenLeaveStillKeepsItsTryOut: a try of holder h (t1) is on its way when its caller
// gives up; the leave sent for it (l1, naming t1) goes unanswered, and h's next try names l1, so
// l1 does nothing when it arrives late. It must still keep t1 out: t1, arriving after it, after
// h's next try was granted and released, would otherwise be granted a lease nobody holds, and the
// key be held by nobody for its TTL.
func TestOvertakenLeaveStillKeepsItsTryOut(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const key = "overtaken-leave"
	acq := func(args ...any) []any { return asArray(srcAcquire, script(t, c, srcAcquire, key, args...)) }

	// h's next try (t2) names l1; it is granted and released.
	if r := acq(overtakingAcquireArgv("h", 1, time.Minute, "s:3", "s:2")...); r[0].(int64) != 1 {
		t.Fatalf("h's try naming the leave = %v; want granted", r)
	}
	script(t, c, srcRelease, key, "h", 0)

	// l1 arrives: it does nothing to the line, and must keep t1 out.
	if r := script(t, c, srcLeave, key, "h", 0, "s:1", 60000, "s:2").([]any); len(r) != 0 {
		t.Fatalf("the overtaken leave = %v; want {}", r)
	}
	if r := acq(overtakingAcquireArgv("h", 1, time.Minute, "s:1", "")[:10]...); r[0].(int64) != 0 {
		t.Fatalf("the try the overtaken leave gave up, arriving after it = %v; want refused (kept out), not a grant nobody holds", r)
	}
	if h := holdersOf(t, c, key); len(h) != 0 {
		t.Fatalf("holders after the late try = %q; want none", h)
	}
}

// TestLeavesNamedByATryOfAnotherLimitAreKeptOut: a try that names the holder's unanswered leaves
// but asks for another limit than the key's is refused, writing nothing else; the Store takes the
// answer as the leaves kept out, and its later tries do not name them again. So they must be kept
// out: one arriving after the holder's next try must not take that try's place.
func TestLeavesNamedByATryOfAnotherLimitAreKeptOut(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const key = "overtaken-by-another-limit"
	acq := func(args ...any) []any { return asArray(srcAcquire, script(t, c, srcAcquire, key, args...)) }
	if r := acq(overtakingAcquireArgv("a", 1, 0, "", "")[:2]...); r[0].(int64) != 1 {
		t.Fatalf("a = %v; want granted", r)
	}
	if r := acq(overtakingAcquireArgv("h", 2, time.Minute, "s:3", "s:2")...); r[0].(int64) != -2 {
		t.Fatalf("h's try of limit 2 naming the leave = %v; want {-2, 1}", r)
	}
	if r := acq(overtakingAcquireArgv("h", 1, time.Minute, "s:4", "")[:10]...); r[0].(int64) != 0 || lineLen(t, srv.Addr, key) != 1 {
		t.Fatalf("h's next try = %v, %d places; want refused with a place", r, lineLen(t, srv.Addr, key))
	}
	script(t, c, srcLeave, key, "h", 0, "", 0, "s:2")
	if n := lineLen(t, srv.Addr, key); n != 1 {
		t.Fatalf("%d places after the late leave; want h's, which its newer try holds", n)
	}
}

// TestTryOfALeaveThatNeverArrivedIsKeptOutByTheHoldersNextTry: under a shared holder id, a try
// that would wait is held back on its way while its ctx ends; the leave sent for it never reaches
// the server (every send fails, until the Store gives up). The holder's next try is granted and
// released; then the first try arrives. It must take nothing: the next try named the leave's try,
// whose leave may never come, so the key is not held by nobody for the lease's TTL.
func TestTryOfALeaveThatNeverArrivedIsKeptOutByTheHoldersNextTry(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	g, _, s := gatedStore(t, srv.Addr, false)
	ctx := context.Background()
	req := core.AcquireRequest{Key: "never-left", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
	if _, err := s.Inspect(ctx, req.Key); err != nil { // the library loaded
		t.Fatal(err)
	}
	g.armed.Store(true)
	g.dropLeaves.Store(true)
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	failed := make(chan error, 1)
	go func() {
		_, err := s.Acquire(actx, req)
		failed <- err
	}()
	<-g.held
	if err := <-failed; !errors.Is(err, context.DeadlineExceeded) {
		close(g.open)
		t.Fatalf("Acquire with its try held back = %v; want the deadline's error", err)
	}
	// The next try waits for the leave, whose sends all fail until the Store gives up on it.
	nctx, ncancel := context.WithTimeout(ctx, 10*time.Second)
	defer ncancel()
	res, err := s.Acquire(nctx, req)
	if err != nil || !res.Granted {
		close(g.open)
		t.Fatalf("the holder's next try = %+v, %v; want a grant", res, err)
	}
	if held, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: res.Fence}); !held || err != nil {
		close(g.open)
		t.Fatalf("Release = %v, %v", held, err)
	}
	close(g.open)
	<-g.written
	if snap, err := s.Inspect(ctx, req.Key); err != nil || len(snap.Leases) != 0 || len(snap.Waiters) != 0 {
		t.Fatalf("after the first try arrived, Inspect = %+v, %v; want nothing held, nobody waiting", snap, err)
	}
}

// TestManyOvertakenLeavesAreKeptOutAndExpire: a try that names many unanswered leaves (a holder
// whose leaves went unanswered for a while) is one ARGV value, which the script takes whole:
// each leave is kept out, and the set that records them, and the lease hash, expire with the
// hold (as long again for the hash at most), so nothing of them stays.
func TestManyOvertakenLeavesAreKeptOutAndExpire(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const key, n = "many-overtaken", 2000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("store%020d:%d", i, i)
	}
	if r := asArray(srcAcquire, script(t, c, srcAcquire, key, overtakingAcquireArgv("h", 1, time.Minute, "s:1", strings.Join(ids, " "))...)); r[0].(int64) != 1 {
		t.Fatalf("the try naming %d leaves = %v; want granted", n, r)
	}
	if got := zcard(t, srv.Addr, key, 3); got != n {
		t.Fatalf("%d leaves kept out, want %d", got, n)
	}
	script(t, c, srcRelease, key, "h", 0)
	mustAcquireScript := func(try string) {
		if r := asArray(srcAcquire, script(t, c, srcAcquire, key, overtakingAcquireArgv("h", 1, time.Minute, try, "")[:10]...)); r[0].(int64) != 1 {
			t.Fatalf("h's try %s = %v; want granted", try, r)
		}
	}
	mustAcquireScript("s:2")
	for _, id := range []string{ids[0], ids[n/2], ids[n-1]} {
		if r := script(t, c, srcLeave, key, "h", 0, "", 0, id).([]any); len(r) != 0 {
			t.Fatalf("the late leave %s = %v; want {}", id, r)
		}
	}
	if h := holdersOf(t, c, key); len(h) != 1 {
		t.Fatalf("holders after the late leaves = %q; want h's lease, untouched", h)
	}
	script(t, c, srcRelease, key, "h", 0)
	for i, k := range rediscore.Keys(key) {
		ttl, err := c.PTTL(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == -1 || ttl > 2*time.Minute+time.Second {
			t.Errorf("key %d (%s) of a released key with leaves kept out: PTTL %v; want gone, or expiring within twice the hold", i, k, ttl)
		}
	}
}
