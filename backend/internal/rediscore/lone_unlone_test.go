package rediscore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestLoneLeaseTurnedIntoTheHashEndsNoEarlierThanItsKey: a second holder's refused try turns a
// lone lease into the lease hash; the lease's expiry there is never before its key's expiry time
// (PEXPIRETIME), through both drivers.
func TestLoneLeaseTurnedIntoTheHashEndsNoEarlierThanItsKey(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, srv.Addr)
			for i := range 20 {
				key := "unlone:" + name + ":" + strconv.Itoa(i)
				k := rediscore.Keys(key)[0]
				mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}, true)
				when, err := c.PExpireTime(ctx, k).Result()
				if err != nil || c.Type(ctx, k).Val() != "string" {
					t.Fatalf("PEXPIRETIME of the lone lease: %v, %v (a %s)", when, err, c.Type(ctx, k).Val())
				}
				mustAcquire(t, s, core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute}, false)
				if exp := expiryOf(t, c, k, "a"); exp < when.Milliseconds() {
					t.Fatalf("the lone lease's key expired at %d ms; the hash ends the lease at %d ms", when.Milliseconds(), exp)
				}
			}
		})
	}
}

// TestLoneLeaseTurnedIntoTheHashAfterAStallKeepsItsExpiry: the server's clock moves on while a
// call that turns a lone lease into the hash runs (a server stalled between the call's TIME and
// its PTTL, which Redis counts from the clock as it reads it then): the lease's expiry in the
// hash is still its key's, and a try after the stall but before that expiry is refused. The
// test plays the clock: TIME answers the call's start, then 5 ms later; PTTL the time left from
// then of a lone lease that ends 10 ms after the call's start.
func TestLoneLeaseTurnedIntoTheHashAfterAStallKeepsItsExpiry(t *testing.T) {
	t.Parallel()
	c := raw(t, redistest.StartServer(t).Addr)
	ctx := context.Background()
	const key = "stalled"
	k := rediscore.Keys(key)[0]
	start := time.Now().Truncate(time.Millisecond)
	end := start.Add(10 * time.Millisecond)
	if err := c.Set(ctx, k, rediscore.LoneTag+strconv.FormatInt(start.Add(-time.Second).UnixMicro(), 10)+" 1 a", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	try := func(first, later time.Time) string {
		r, err := c.Eval(ctx, stalledClock(rediscore.Sources[srcAcquire], first, later, end), rediscore.Keys(key), "b", 60000).Result()
		return fmt.Sprint(r, " ", err)
	}
	if got := try(start, start.Add(5*time.Millisecond)); !strings.HasPrefix(got, "[0 ") {
		t.Fatalf("b's try during a's lease: %s; want a refusal", got)
	}
	if exp := expiryOf(t, c, k, "a"); exp != end.UnixMilli() {
		t.Fatalf("the hash ends a's lease at %d ms; want %d, its key's expiry (%d ms before)", exp, end.UnixMilli(), end.UnixMilli()-exp)
	}
	at := start.Add(7 * time.Millisecond)
	if got := try(at, at); !strings.HasPrefix(got, "[0 ") {
		t.Fatalf("b's try 3 ms before a's lease ends: %s; want a refusal", got)
	}
}

// stalledClock returns src with TIME answering first at its first call and later after, and PTTL
// of a string the time left from later until end (0 once past).
func stalledClock(src string, first, later, end time.Time) string {
	return fmt.Sprintf(`local server = redis
local times = 0
local function run(via, cmd, k, ...)
  if cmd == 'TIME' then
    times = times + 1
    if times == 1 then return {'%d', '%d'} end
    return {'%d', '%d'}
  end
  if cmd == 'PTTL' and server.call('TYPE', k)['ok'] == 'string' then return math.max(%d, 0) end
  return via(cmd, k, ...)
end
local redis = setmetatable({call = function(...) return run(server.call, ...) end,
  pcall = function(...) return run(server.pcall, ...) end}, {__index = server})
`, first.Unix(), first.Nanosecond()/1000, later.Unix(), later.Nanosecond()/1000, end.Sub(later).Milliseconds()) + src
}

// expiryOf returns the expiry, in server ms, of holder's lease in the lease hash k.
func expiryOf(t *testing.T, c *redis.Client, k, holder string) int64 {
	t.Helper()
	e, err := c.HGet(context.Background(), k, ":"+holder).Result()
	if err != nil {
		t.Fatalf("%s's entry in the lease hash: %v", holder, err)
	}
	exp, err := strconv.ParseInt(strings.Fields(e)[2], 10, 64)
	if err != nil {
		t.Fatalf("%s's entry %q: %v", holder, e, err)
	}
	return exp
}

// TestFenceAloneTurnedIntoTheHashInItsLastMsKeepsItsFence: a watch, or a leave, in the last ms of
// a fence alone (released before the clock passed it; Redis keeps a key through the ms of its
// expiry, and PTTL says 0 then), with the clock still below the fence, turns it into the hash:
// the hash keeps the fence until the clock passes it, so a grant in that ms is above it. The
// test plays the clock: TIME answers 200 µs below the fence, in its ms, and PTTL of a string 0.
func TestFenceAloneTurnedIntoTheHashInItsLastMsKeepsItsFence(t *testing.T) {
	t.Parallel()
	c := raw(t, redistest.StartServer(t).Addr)
	ctx := context.Background()
	ms := time.Now().Truncate(time.Millisecond)
	now, fence := ms.Add(300*time.Microsecond), ms.Add(500*time.Microsecond).UnixMicro()
	for name, call := range map[string]struct {
		src  int
		args []any
	}{
		"watch":          {srcWatch, []any{30000}},
		"leave":          {srcLeave, []any{"w", 0}},
		"leave of a try": {srcLeave, []any{"w", 0, "s:1", 60000}},
	} {
		key := "lastms:" + name
		ks := rediscore.Keys(key)
		if err := c.Set(ctx, ks[0], rediscore.LoneTag+strconv.FormatInt(fence, 10), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Eval(ctx, lastMsClock(rediscore.Sources[call.src], now), ks, call.args...).Result(); err != nil && err != redis.Nil {
			t.Fatalf("%s: %v", name, err)
		}
		r, err := c.Eval(ctx, lastMsClock(rediscore.Sources[srcAcquire], now.Add(time.Microsecond)), ks, "a", 60000).Result()
		if f, ok := r.(int64); err != nil || !ok || f <= fence {
			t.Errorf("a grant after the %s, in the fence's ms: %v, %v; want a fence above %d", name, r, err, fence)
		}
	}
}

// lastMsClock returns src with TIME answering now, and PTTL of a string 0: the key's last ms. An
// expiry the script sets in the future (PEXPIRE, PSETEX) is an hour longer than asked (as in clocked: the server's
// own clock, which the test does not play, must not expire it meanwhile); one of 0 ms or less
// deletes the key, as Redis does.
func lastMsClock(src string, now time.Time) string {
	return fmt.Sprintf(`local server = redis
local function run(via, cmd, ...)
  local k, x = ...
  if cmd == 'TIME' then return {'%d', '%d'} end
  if cmd == 'PTTL' and server.call('TYPE', k)['ok'] == 'string' then return 0 end
  if cmd == 'PEXPIRE' and tonumber(x) > 0 then return via(cmd, k, tonumber(x) + 3600000) end
  if cmd == 'PSETEX' and tonumber(x) > 0 then return via(cmd, k, tonumber(x) + 3600000, select(3, ...)) end
  return via(cmd, ...)
end
local redis = setmetatable({call = function(...) return run(server.call, ...) end,
  pcall = function(...) return run(server.pcall, ...) end}, {__index = server})
`, now.Unix(), now.Nanosecond()/1000) + src
}
