package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// Tests of the acquire script's shape: one read of the lease hash; serve says whether the line
// is empty, and reads it only while its keys live; the hash outlives what it records.

// raw returns a plain client to addr, closed when t ends.
func raw(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// expiryInEntry is the expiry in a lease's entry, "<permits> <fence> <expiry>...".
var expiryInEntry = regexp.MustCompile(`^(\d+ \d+) \d+`)

// holdersOf returns the leases in key's lease hash by holder, each as "<permits> <fence>" and
// what follows the expiry (the q mark, the value): its entries ':' + holder, without expiries.
func holdersOf(t *testing.T, c *redis.Client, key string) map[string]string {
	t.Helper()
	m, err := c.HGetAll(context.Background(), rediscore.Keys(key)[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	leases := map[string]string{}
	for f, v := range m {
		if h, ok := strings.CutPrefix(f, ":"); ok {
			leases[h] = expiryInEntry.ReplaceAllString(v, "$1")
		}
	}
	return leases
}

// counters are the lease hash's counters (see common.lua); an absent one is 0.
type counters struct {
	fence, limit, seq, watch, line, left, keep uint64
}

// countersOf returns the counters of key.
func countersOf(t *testing.T, c *redis.Client, key string) counters {
	t.Helper()
	m, err := c.HGetAll(context.Background(), rediscore.Keys(key)[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	var cs counters
	for name, p := range map[string]*uint64{"fence": &cs.fence, "limit": &cs.limit, "seq": &cs.seq, "watch": &cs.watch,
		"line": &cs.line, "left": &cs.left, rediscore.KeepField: &cs.keep} {
		if v, ok := m[name]; ok {
			if *p, err = strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatalf("counter %s of %q: %q", name, key, v)
			}
		}
	}
	return cs
}

// pttl returns the PTTL of the i-th Redis key of key (-2: none; -1: no expiry).
func pttl(t *testing.T, c *redis.Client, key string, i int) time.Duration {
	t.Helper()
	v, err := c.Do(context.Background(), "PTTL", rediscore.Keys(key)[i]).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(v) * time.Millisecond
}

// expiresAt returns when the i-th key of key expires, in the server's ms (PEXPIRETIME: -1 for no
// expiry, -2 for no key). Two keys' expiries compare exactly by it, whatever time passes between
// the reads, which their PTTLs do not.
func expiresAt(t *testing.T, c *redis.Client, key string, i int) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), "PEXPIRETIME", rediscore.Keys(key)[i]).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// expired waits until the server's clock is past the lease of holder on key (Inspect lists
// unexpired leases only, and writes nothing).
func expired(t *testing.T, s core.Store, key, holder string) {
	t.Helper()
	poll.Until(t, "the lease to expire", func() bool {
		snap, err := s.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range snap.Leases {
			if l.Holder == holder {
				return false
			}
		}
		return true
	})
}

// TestTakingALineGrantClearsItsMarkAndKeepsItsFence: a waiter granted from the line by a release
// holds "<n> <fence> q\n<value>"; its Acquire (census finds the lease) takes it: the same fence,
// the q mark gone, the value the one it now asks with. An Acquire for other permits is refused
// and changes nothing.
func TestTakingALineGrantClearsItsMarkAndKeepsItsFence(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c, ctx := mk(t, srv.Addr), raw(t, srv.Addr), context.Background()
			req := func(holder, value string) core.AcquireRequest {
				return core.AcquireRequest{Key: "mark", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Value: value}
			}
			mustAcquire(t, s, req("a", ""), true)
			mustAcquire(t, s, req("w", "first"), false)
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "mark", Holder: "a"}); err != nil {
				t.Fatal(err)
			}
			fence := countersOf(t, c, "mark").fence
			if got, want := holdersOf(t, c, "mark")["w"], fmt.Sprintf("1 %d q\nfirst", fence); got != want {
				t.Fatalf("the line's grant is stored as %q, want %q", got, want)
			}
			two := req("w", "other")
			two.Permits = 2 // under the key's limit: another limit would be refused as a mismatch first
			two.Wait = 0    // a waiting try that fails is followed by a leave, which gives the grant up
			if _, err := s.Acquire(ctx, two); !errors.Is(err, core.ErrInvalid) {
				t.Fatalf("Acquire of 2 permits over a grant of 1: %v, want ErrInvalid", err)
			}
			if got, want := holdersOf(t, c, "mark")["w"], fmt.Sprintf("1 %d q\nfirst", fence); got != want {
				t.Fatalf("a refused Acquire of other permits changed the grant to %q, want %q", got, want)
			}
			if res := mustAcquire(t, s, req("w", "second"), true); res.Fence != fence {
				t.Fatalf("taking the grant gave fence %d, want the grant's %d", res.Fence, fence)
			}
			if got, want := holdersOf(t, c, "mark")["w"], fmt.Sprintf("1 %d\nsecond", fence); got != want {
				t.Fatalf("the taken grant is stored as %q, want %q: no q mark, the new value", got, want)
			}
			if res := mustAcquire(t, s, req("w", ""), true); res.Fence != fence {
				t.Fatalf("renewing gave fence %d, want %d", res.Fence, fence)
			}
			if got, want := holdersOf(t, c, "mark")["w"], fmt.Sprintf("1 %d", fence); got != want {
				t.Fatalf("the renewed lease is stored as %q, want %q", got, want)
			}
			if n := lineLen(t, srv.Addr, "mark"); n != 0 {
				t.Fatalf("the line has %d places, want none", n)
			}
		})
	}
}

// TestWaiterTakesGrantItsOwnAcquireServes: the waiter at the head retries after the holder's
// lease expired; its own script's serve grants it from the line ("q", published), and the same
// script finds that grant and takes it: granted, the mark cleared, its place and request
// gone.
func TestWaiterTakesGrantItsOwnAcquireServes(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			w := core.AcquireRequest{Key: "self", Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Value: "v"}
			// a's TTL leaves w's first try, under the race detector on a loaded machine, time to be
			// refused before a's lease ends (100 ms did not).
			mustAcquire(t, s, core.AcquireRequest{Key: "self", Holder: "a", Permits: 1, Limit: 1, TTL: time.Second}, true)
			mustAcquire(t, s, w, false)
			expired(t, s, "self", "a")
			res := mustAcquire(t, s, w, true)
			if fence := countersOf(t, c, "self").fence; fence != res.Fence {
				t.Fatalf("the last fence is %d, want the grant's %d", fence, res.Fence)
			}
			if got, want := holdersOf(t, c, "self"), map[string]string{"w": fmt.Sprintf("1 %d\nv", res.Fence)}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("holders %q, want %q", got, want)
			}
			for _, i := range []int{1, 2} {
				if p := pttl(t, c, "self", i); p != -2*time.Millisecond {
					t.Errorf("%s still exists (PTTL %v): the place was not taken out of the line", rediscore.Keys("self")[i], p)
				}
			}
			if p := pttl(t, c, "self", 0); p < time.Minute || p > 4*time.Minute {
				t.Errorf("lease hash PTTL %v, want the TTL at least, twice the line's life at most", p)
			}
		})
	}
}

// TestNewcomerAfterServeEmptiesTheLine: permits freed by expiry go first to a line longer than
// one read of serve (64 places); the newcomer whose script served them all finds the line empty
// and takes what is left, not a permit more; its grant leaves no line keys, and the lease hash
// outlives the places it counted.
func TestNewcomerAfterServeEmptiesTheLine(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c, ctx := mk(t, srv.Addr), raw(t, srv.Addr), context.Background()
			const limit, waiters = 100, 70
			var key string
			req := func(holder string, n int, ttl, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: n, Limit: limit, TTL: ttl, Wait: wait}
			}
			// a's lease must outlast the waiters' tries, or a try that finds it expired is served
			// the permits: on a stalled machine, start over on a fresh key with twice the TTL.
			for held := 150 * time.Millisecond; ; held *= 2 {
				key = fmt.Sprint("many-", held)
				mustAcquire(t, s, req("a", limit, held, 0), true)
				granted := false
				for i := range waiters {
					res, err := s.Acquire(ctx, req(fmt.Sprint("w", i), 1, time.Hour, time.Hour))
					if err != nil {
						t.Fatal(err)
					}
					if granted = res.Granted; granted {
						break
					}
				}
				if hs := holders(t, s, key); !granted && len(hs) == 1 && hs[0] == "a" {
					break
				}
				t.Logf("a's lease of %v expired before the %d waiters' tries were made; again with %v", held, waiters, 2*held)
			}
			expired(t, s, key, "a")
			ttl := 2 * time.Second
			res := mustAcquire(t, s, req("new", limit-waiters, ttl, 0), true)
			mustAcquire(t, s, req("late", 1, time.Hour, 0), false)
			h := holdersOf(t, c, key)
			if len(h) != waiters+1 {
				t.Fatalf("%d leases, want %d", len(h), waiters+1)
			}
			var prev uint64
			for i := range waiters {
				var n int
				var f uint64
				if _, err := fmt.Sscanf(h[fmt.Sprint("w", i)], "%d %d q", &n, &f); err != nil || n != 1 || f <= prev {
					t.Fatalf("w%d holds %q, want 1 permit granted from the line, in order", i, h[fmt.Sprint("w", i)])
				}
				prev = f
			}
			if got, want := h["new"], fmt.Sprintf("%d %d", limit-waiters, res.Fence); got != want || res.Fence <= prev {
				t.Fatalf("new holds %q, want %q above the line's fences", got, want)
			}
			for _, i := range []int{1, 2} {
				if p := pttl(t, c, key, i); p != -2*time.Millisecond {
					t.Errorf("%s exists (PTTL %v) after the line was served", rediscore.Keys(key)[i], p)
				}
			}
			if line := countersOf(t, c, key).line; line != 0 {
				t.Errorf("the line lives until %d by the counters, want 0 once it was found empty", line)
			}
			// The hash outlives the grants' hour, by at most as long again.
			if p := pttl(t, c, key, 0); p <= 59*time.Minute || p > 2*time.Hour {
				t.Errorf("lease hash PTTL %v, want in (59 minutes, two hours]", p)
			}
			if snap, _ := s.Inspect(ctx, key); snap.InUse() != limit {
				t.Errorf("%d permits in use, want %d", snap.InUse(), limit)
			}
		})
	}
}

// TestLapsedPlacesLetANewcomerIn: a line of places whose waits have all ended (more than one
// read of serve) is dropped by the newcomer's own script, which then grants it as to an empty
// line: its grant, no line keys left, and the lease hash past its TTL, by at most as long again.
//
// The holder's lease must outlast the 80 waiters' tries, or the try that finds it expired grants
// the line's head (whose place still lives) a minute's lease, and the newcomer is refused. So
// that a stalled machine cannot break that, the lease starts short and, should it have expired
// before the last try, the set-up starts over on a fresh key with twice the TTL.
func TestLapsedPlacesLetANewcomerIn(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c, ctx := mk(t, srv.Addr), raw(t, srv.Addr), context.Background()
			const wait = 100 * time.Millisecond
			var key string
			var lastPlace time.Time // by the server's clock
			for held := 100 * time.Millisecond; ; held *= 2 {
				key = fmt.Sprint("lapsing-", held)
				req := func(holder string, ttl time.Duration) core.AcquireRequest {
					return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: ttl, Wait: wait}
				}
				mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: held}, true)
				granted := false // a try found a's lease expired, and was granted
				for i := range 80 {
					res, err := s.Acquire(ctx, req(fmt.Sprint("gone", i), time.Minute))
					if err != nil {
						t.Fatal(err)
					}
					if granted = res.Granted; granted {
						break
					}
				}
				lastPlace = c.Time(ctx).Val()
				if hs := holders(t, s, key); !granted && len(hs) == 1 && hs[0] == "a" {
					break // a held past the last try: no try and no place was granted
				}
				t.Logf("a's lease of %v expired before the 80 tries were made; again with %v", held, 2*held)
			}
			expired(t, s, key, "a")
			poll.Until(t, "the places' waits to end by the server's clock", func() bool {
				return c.Time(ctx).Val().Sub(lastPlace) > wait+10*time.Millisecond
			})
			ttl := 3 * time.Second
			mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "new", Permits: 1, Limit: 1, TTL: ttl}, true)
			// The line's keys are gone, or expire this very millisecond: their expiry and the
			// line's hint, which the script goes by, are set together, and at the hint's ms the
			// script finds the line dead while Redis still keeps the keys (until it is past).
			for _, i := range []int{1, 2} {
				if p := pttl(t, c, key, i); p != -2*time.Millisecond && p != 0 {
					t.Errorf("%s exists (PTTL %v) after its places lapsed", rediscore.Keys(key)[i], p)
				}
			}
			if p := pttl(t, c, key, 0); p <= ttl-time.Second || p > 2*ttl {
				t.Errorf("lease hash PTTL %v, want in (%v, %v]", p, ttl-time.Second, 2*ttl)
			}
			if h := holdersOf(t, c, key); len(h) != 1 || h["new"] == "" {
				t.Errorf("holders %q, want new's lease alone", h)
			}
		})
	}
}

// TestHeadThatServeCannotGrantKeepsTheLine: after an expiry frees a permit that the head (asking
// two) cannot use, serve stops at the head: a newcomer for whom the permit would do is refused,
// and takes the last place; a waiter's retry keeps its place; the line keeps its expiry, and
// the lease hash outlives it.
func TestHeadThatServeCannotGrantKeepsTheLine(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c, ctx := mk(t, srv.Addr), raw(t, srv.Addr), context.Background()
			req := func(holder string, n int, ttl, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: "head", Holder: holder, Permits: n, Limit: 2, TTL: ttl, Wait: wait}
			}
			mustAcquire(t, s, req("a", 1, 100*time.Millisecond, 0), true)
			mustAcquire(t, s, req("b", 1, time.Minute, 0), true)
			mustAcquire(t, s, req("big", 2, time.Minute, time.Hour), false)
			mustAcquire(t, s, req("c", 1, time.Minute, time.Hour), false)
			before, err := c.ZScore(ctx, rediscore.Keys("head")[1], "c").Result()
			if err != nil {
				t.Fatal(err)
			}
			expired(t, s, "head", "a")
			mustAcquire(t, s, req("try", 1, time.Minute, 0), false)
			mustAcquire(t, s, req("new", 1, time.Minute, time.Hour), false)
			mustAcquire(t, s, req("c", 1, time.Minute, time.Hour), false)
			if after, _ := c.ZScore(ctx, rediscore.Keys("head")[1], "c").Result(); after != before {
				t.Errorf("c's place moved from %v to %v on its retry", before, after)
			}
			line, _ := c.ZRange(ctx, rediscore.Keys("head")[1], 0, -1).Result()
			if fmt.Sprint(line) != "[big c new]" {
				t.Fatalf("the line is %v, want [big c new]", line)
			}
			if h := holdersOf(t, c, "head"); len(h) != 1 || h["b"] == "" {
				t.Fatalf("holders %q, want b's lease alone", h)
			}
			// The line lives a minute past the leases in its way at least (its waiters try again
			// when those expire), twice that at most, not the hour of the waits.
			lineTTL := pttl(t, c, "head", 1)
			if lineTTL <= 2*time.Minute-5*time.Second || lineTTL > 4*time.Minute {
				t.Errorf("queue PTTL %v, want in (2m less a try's time, 4m]", lineTTL)
			}
			if hash, line := expiresAt(t, c, "head", 0), expiresAt(t, c, "head", 1); hash < line {
				t.Errorf("lease hash expires at %d ms, want at or past the line's %d", hash, line)
			}
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "head", Holder: "b"}); err != nil {
				t.Fatal(err)
			}
			if h := holdersOf(t, c, "head"); len(h) != 1 || h["big"] == "" {
				t.Fatalf("after b's release, holders %q, want the head's grant alone", h)
			}
			if line, _ := c.ZRange(ctx, rediscore.Keys("head")[1], 0, -1).Result(); fmt.Sprint(line) != "[c new]" {
				t.Fatalf("after the head's grant the line is %v, want [c new]", line)
			}
			// A grant from the line to the head, with places left behind it: the lease hash
			// still outlives them.
			if hash, line := expiresAt(t, c, "head", 0), expiresAt(t, c, "head", 1); hash < line {
				t.Errorf("after the line's grant, the lease hash expires at %d ms, want at or past the line's %d", hash, line)
			}
		})
	}
}

// TestServeEmptiesTheLineThenTheCallerTakesAPlace: the newcomer's own call grants the whole line
// (an expiry freed the permit), finds no room left, and takes a place: the line lives again, its
// keys expire with it, and the next release grants the newcomer.
func TestServeEmptiesTheLineThenTheCallerTakesAPlace(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	var key string
	acq := func(holder string, ttl, wait time.Duration) []any {
		return asArray(srcAcquire, script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, ttl, wait, false, "", "")...))
	}
	// w must find a's lease live and wait: a stall between the two calls longer than a's TTL
	// (a loaded machine) grants w instead, and the test starts again on a fresh key, a's TTL
	// doubled.
	for ttl := 30 * time.Millisecond; ; ttl *= 2 {
		key = fmt.Sprint("emptied-", ttl.Milliseconds())
		acq("a", ttl, 0)
		if r := acq("w", time.Minute, time.Minute); r[0].(int64) == 0 {
			break
		} else if ttl > 5*time.Second {
			t.Fatalf("w = %v after a's grant of TTL %v; want refused, a's lease live", r, ttl)
		}
	}
	poll.Until(t, "a's lease to expire", func() bool { return script(t, c, srcInspect, key).([]any)[1].(int64) == 0 }) // a expired
	if r := acq("n", time.Minute, time.Minute); r[0].(int64) != 0 {
		t.Fatalf("n = %v; want refused: its call granted w, who holds the permit", r)
	}
	if h := holdersOf(t, c, key); len(h) != 1 || !strings.HasSuffix(h["w"], " q") {
		t.Fatalf("holders %q; want w's grant from the line alone", h)
	}
	line, err := c.ZRange(context.Background(), rediscore.Keys(key)[1], 0, -1).Result()
	if err != nil || strings.Join(line, " ") != "n" {
		t.Fatalf("line %q, %v; want n", line, err)
	}
	for _, i := range []int{1, 2} {
		if p := pttl(t, c, key, i); p < 50*time.Second {
			t.Errorf("%s PTTL %v; want about the minute n waits", rediscore.Keys(key)[i], p)
		}
	}
	if r := asArray(srcRelease, script(t, c, srcRelease, key, "w", 0)); len(r) != 3 || r[1] != "n" {
		t.Fatalf("release of w = %v; want n granted", r)
	}
}
