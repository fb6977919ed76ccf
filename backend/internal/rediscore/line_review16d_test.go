package rediscore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
)

// TestLapsedPlaceIsNotRevivedBehindABlockedHead: a place whose wait ended (its waiter gone
// without a leave) behind a head that cannot be served is dead: a later try of the same holder
// takes the last place, behind the waiters who kept theirs, not its old place.
func TestLapsedPlaceIsNotRevivedBehindABlockedHead(t *testing.T) {
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	acq := func(holder string, wait time.Duration) []any {
		r := script(t, c, srcAcquire, "lapsed", acquireArgv(holder, 1, 1, time.Minute, wait, "ch", false, "", "")...)
		return r.([]any)
	}
	if r := acq("a", 0); r[0].(int64) != 1 {
		t.Fatalf("a: %v", r)
	}
	acq("head", time.Minute)
	acq("lapsing", 50*time.Millisecond)
	acq("kept", time.Minute)
	start := time.Now()
	pollUntil(t, func() bool { return time.Since(start) > 100*time.Millisecond })
	acq("lapsing", time.Minute)
	line, err := c.ZRange(context.Background(), rediscore.Keys("lapsed")[1], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(line, " "); got != "head kept lapsing" {
		t.Errorf("line %q, want %q: a lapsed place came back ahead of a waiter", got, "head kept lapsing")
	}
}

// TestShorterWaitAfterALongerKeepsTheLine: a waiter with a short wait behind one with a long
// wait does not shorten the line: once the short wait ends, a newcomer is still refused, and the
// release grants the long waiter.
func TestShorterWaitAfterALongerKeepsTheLine(t *testing.T) {
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const key = "shorter"
	acq := func(holder string, wait time.Duration) []any {
		return script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, time.Minute, wait, "ch", false, "", "")...).([]any)
	}
	acq("a", 0)
	acq("long", time.Minute)
	acq("short", 30*time.Millisecond)
	start := time.Now()
	pollUntil(t, func() bool { return time.Since(start) > 60*time.Millisecond })
	if r := acq("newcomer", 0); r[0].(int64) != 0 {
		t.Fatalf("a newcomer while long waits = %v; want refused", r)
	}
	if r := script(t, c, srcRelease, key, "a", 0).([]any); len(r) != 3 || r[1] != "long" {
		t.Fatalf("release = %v; want long granted", r)
	}
}

// TestServeEmptiesTheLineThenTheCallerTakesAPlace: the newcomer's own call grants the whole line
// (an expiry freed the permit), finds no room left, and takes a place: the line lives again, its
// keys expire with it, and the next release grants the newcomer.
func TestServeEmptiesTheLineThenTheCallerTakesAPlace(t *testing.T) {
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	const key = "emptied"
	acq := func(holder string, ttl, wait time.Duration) []any {
		return script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, ttl, wait, "ch", false, "", "")...).([]any)
	}
	acq("a", 30*time.Millisecond, 0)
	acq("w", time.Minute, time.Minute)
	pollUntil(t, func() bool { return script(t, c, srcInspect, key).([]any)[1].(int64) == 0 }) // a expired
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
	if r := script(t, c, srcRelease, key, "w", 0).([]any); len(r) != 3 || r[1] != "n" {
		t.Fatalf("release of w = %v; want n granted", r)
	}
}
