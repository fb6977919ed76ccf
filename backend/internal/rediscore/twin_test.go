package rediscore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/testenv"
)

// The twin: two servers at one clock, one running a script as it is and the other with its fast
// path switched off, and the snapshot of a key that the two must agree on.

// generalSource returns Sources[i] with the lone tier and the fast path of acquire, extend or
// release not tried (see common.lua): the general path is what the call then runs.
func generalSource(t *testing.T, i int) string {
	t.Helper()
	return withoutTiers(t, i, "nil", "nil")
}

// hashSource returns Sources[i] with the lone tier of acquire, extend or release not tried: the
// fast path, then the general path, on a lease hash (a lone lease is made into one first).
func hashSource(t *testing.T, i int) string {
	t.Helper()
	return withoutTiers(t, i, "", "nil")
}

// withoutTiers returns Sources[i] with its fast path, then its lone tier, passed to guarded as
// the Lua expressions fast and lone ("": as it is).
func withoutTiers(t *testing.T, i int, fast, lone string) string {
	t.Helper()
	name := map[int]string{srcAcquire: "acquire", srcExtend: "extend", srcRelease: "release"}[i]
	src := rediscore.Sources[i]
	if name == "" {
		return src
	}
	call := ", " + name + "_fast, " + name + "_lone, eval_keys, eval_args, "
	if strings.Count(src, call) != 1 {
		t.Fatalf("script %d: the tiers of %q are not passed to guarded once", i, name)
	}
	if fast == "" {
		fast = name + "_fast"
	}
	if lone == "" {
		lone = name + "_lone"
	}
	return strings.Replace(src, call, ", "+fast+", "+lone+", eval_keys, eval_args, ", 1)
}

// twin is a server whose clock the test sets (miniredis: m; a real server: its scripts read a
// clock of the test's, see clocked), with a pattern subscription that sees every message
// published on it.
type twin struct {
	m  *miniredis.Miniredis
	c  *redis.Client
	ps *redis.PubSub
}

func newTwin(t *testing.T, real bool) *twin {
	tw := &twin{}
	if real {
		tw.c = raw(t, redistest.StartServer(t).Addr)
	} else {
		tw.m = miniredis.RunT(t)
		tw.c = raw(t, tw.m.Addr())
	}
	tw.ps = tw.c.PSubscribe(context.Background(), "*")
	t.Cleanup(func() { tw.ps.Close() })
	if _, err := tw.ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tw
}

// clocked returns src with TIME answering the test's clock, which evalAt (or a pipeline that
// ends with setClock) sets in the key clockKey just before the call: a local redis that shadows
// the server's in the whole script, and passes every other command on; but every expiry the
// script sets is an hour longer than asked, so that no key (a lease hash kept a millisecond, for
// a fence just above now) expires by the server's own clock, which the test does not move, while
// a test compares twins. A lone lease's expiry, which is the key's own (PSETEX, PEXPIRE of a
// string), is kept by the test's clock instead: in the hash fakeExpiries, which GET, PTTL and
// TYPE read and DEL clears. The clock is read from a key, not written into the text, so that the
// text of a script is the same at every call: the server compiles it once, where a text per
// call had it compile (and keep) a script of some 50 kB at every step of a history.
func clocked(src string) string {
	return fmt.Sprintf(`local server = redis
local clock_ms, clock_s, clock_us = string.match(server.call('GET', '%[1]s') or '', '^(%%d+) (%%d+) (%%d+)$')
if not clock_ms then return server.error_reply('the test set no clock in %[1]s') end
local now_ms = tonumber(clock_ms)
local function expired(k)
  local e = server.call('HGET', '%[2]s', k)
  if e and tonumber(e) <= now_ms then
    server.call('DEL', k)
    server.call('HDEL', '%[2]s', k)
    return true
  end
  return false
end
local function run(via, cmd, ...)
  local k, x, y, ms = ...
  if cmd == 'TIME' then return {clock_s, clock_us} end
  if cmd == 'PSETEX' then
    server.call('HSET', '%[2]s', k, now_ms + tonumber(x))
    return via(cmd, k, tonumber(x) + 3600000, y)
  end
  if cmd == 'PEXPIRE' then
    if server.call('TYPE', k)['ok'] == 'string' then server.call('HSET', '%[2]s', k, now_ms + tonumber(x)) end
    return via(cmd, k, tonumber(x) + 3600000)
  end
  if cmd == 'DEL' then server.call('HDEL', '%[2]s', k) end
  if (cmd == 'GET' or cmd == 'TYPE' or cmd == 'PTTL') and expired(k) then
    if cmd == 'GET' then return false end
    if cmd == 'TYPE' then return {ok = 'none'} end
    return -2
  end
  if cmd == 'PTTL' then
    local e = server.call('HGET', '%[2]s', k)
    if e then return tonumber(e) - now_ms end
  end
  return via(cmd, ...)
end
local redis = setmetatable({call = function(...) return run(server.call, ...) end,
  pcall = function(...) return run(server.pcall, ...) end}, {__index = server})
`, clockKey, fakeExpiries) + src
}

// clockKey is the key where setClock keeps the test's clock for clocked scripts: "<ms> <s> <µs>".
const clockKey = "leasehold-test:clock"

// setClock queues, on p, the setting of the clock clocked scripts read to now.
func setClock(ctx context.Context, p redis.Pipeliner, now time.Time) {
	p.Set(ctx, clockKey, fmt.Sprintf("%d %d %d", now.UnixMilli(), now.Unix(), now.Nanosecond()/1000), 0)
}

// evalAt runs src, clocked, at now: the clock's setting and the call go in one round trip.
func evalAt(ctx context.Context, c *redis.Client, now time.Time, src string, keys []string, args ...any) *redis.Cmd {
	return evalCached(ctx, c, clocked(src), keys, args, func(p redis.Pipeliner) { setClock(ctx, p, now) })
}

// scriptSHAs caches the SHA1 digests of the scripts evalCached runs, by text.
var scriptSHAs sync.Map

// evalCached runs src with keys and args, after what before queues (if not nil) in the same
// round trip, by its digest (EVALSHA), loading it once where the server does not have it yet:
// the text of a script with the whole library is some 50 kB, which EVAL would send, and the
// server hash, at every call.
func evalCached(ctx context.Context, c *redis.Client, src string, keys []string, args []any, before func(redis.Pipeliner)) *redis.Cmd {
	sha, ok := scriptSHAs.Load(src)
	if !ok {
		sum := sha1.Sum([]byte(src))
		sha, _ = scriptSHAs.LoadOrStore(src, hex.EncodeToString(sum[:]))
	}
	var cmd *redis.Cmd
	for range 2 {
		c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if before != nil {
				before(p)
			}
			cmd = p.EvalSha(ctx, sha.(string), keys, args...)
			return nil
		})
		if !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			break
		}
		if err := c.ScriptLoad(ctx, src).Err(); err != nil {
			return cmd
		}
	}
	return cmd
}

// fakeExpiries is the hash where clocked keeps the lone leases' expiries by the test's clock.
const fakeExpiries = "leasehold-test:fake-expiries"

// twinServers are the servers the tables of states run their twins on: redis-server, and under
// LEASEHOLD_SOAK=1 miniredis too, whose Lua (gopher-lua) is a second reading of the scripts, and
// slow.
func twinServers() map[string]bool {
	if testenv.Soak() {
		return map[string]bool{"miniredis": false, "redis-server": true}
	}
	return map[string]bool{"redis-server": true}
}

// fastState is a key's state: its lease hash (nil: none), and the line and left when set.
type fastState struct {
	hash        map[string]string
	queue, left map[string]float64
	waiting     map[string]string
	// order is the order in which the hash's entries are written (nil: sorted), which a small
	// hash's HGETALL keeps: the quick paths read a lone lease's entries in the order a grant on a
	// new hash writes them.
	order []string
}

// snapshot is everything a call may change, printed: each of the key's Redis keys with its
// type, expiry and content, and the messages the call published.
func (tw *twin) snapshot(t *testing.T, key string, reply string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	b.WriteString("reply " + reply + "\n")
	// Two round trips: each key's type and expiry, then the contents of those that have any and
	// a sentinel message: every message the call published came before it, on this one
	// subscription.
	keys := rediscore.Keys(key)
	types, pttls := make([]*redis.StatusCmd, len(keys)), make([]*redis.Cmd, len(keys))
	if _, err := tw.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			types[i] = p.Type(ctx, k)
			// The server counts an expiry down on its own clock, not the test's, from the call
			// to this read, so two twins' expiries differ by the time between their reads:
			// compare snapshots with sameSnapshots. Read as ms: 2^50 ms overflows a
			// time.Duration.
			pttls[i] = p.Do(ctx, "pttl", k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	hashes, zsets := make([]*redis.MapStringStringCmd, len(keys)), make([]*redis.ZSliceCmd, len(keys))
	strs, fakes := make([]*redis.StringCmd, len(keys)), make([]*redis.StringCmd, len(keys))
	if _, err := tw.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			switch types[i].Val() {
			case "hash":
				hashes[i] = p.HGetAll(ctx, k)
			case "zset":
				zsets[i] = p.ZRangeWithScores(ctx, k, 0, -1)
			case "string":
				// A lone lease, or the fence alone: its text, and its expiry by the test's
				// clock, which clocked keeps (the server's PTTL, an hour longer, is compared
				// only within seconds: a fence alone lives a few ms).
				strs[i], fakes[i] = p.Get(ctx, k), p.HGet(ctx, fakeExpiries, k)
			}
		}
		p.Publish(ctx, "sentinel", "end")
		return nil
	}); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		pttl, err := pttls[i].Int64()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s pttl %dms\n", k, types[i].Val(), pttl)
		switch {
		case hashes[i] != nil:
			m := hashes[i].Val()
			for _, f := range slices.Sorted(maps.Keys(m)) {
				fmt.Fprintf(&b, "  %q = %q\n", f, m[f])
			}
		case zsets[i] != nil:
			for _, z := range zsets[i].Val() {
				fmt.Fprintf(&b, "  %q %v\n", z.Member, z.Score)
			}
		case strs[i] != nil:
			fmt.Fprintf(&b, "  %q\n", strs[i].Val())
			if e := fakes[i].Val(); e != "" {
				fmt.Fprintf(&b, "  expires at %s ms by the test's clock\n", e)
			}
		}
	}
	for {
		msg, err := tw.ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Channel == "sentinel" {
			break
		}
		fmt.Fprintf(&b, "published %q on %q\n", msg.Payload, msg.Channel)
	}
	return b.String()
}

// run sets tw's clock to now and key's state to st, runs src with args, and returns the
// snapshot.
func (tw *twin) run(t *testing.T, now time.Time, key string, st fastState, src string, args []any) string {
	t.Helper()
	line := func(ctx context.Context, p redis.Pipeliner, ks []string) {
		for h, sc := range st.queue {
			p.ZAdd(ctx, ks[1], redis.Z{Score: sc, Member: h})
		}
		for h, v := range st.waiting {
			p.HSet(ctx, ks[2], h, v)
		}
		for id, sc := range st.left {
			p.ZAdd(ctx, ks[3], redis.Z{Score: sc, Member: id})
		}
	}
	return tw.runState(t, now, key, keyState{hash: st.hash, order: st.order, setup: line}, src, args)
}
