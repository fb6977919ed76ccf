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
