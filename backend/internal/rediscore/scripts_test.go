package rediscore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// Tests of the scripts themselves (scripts.go's Sources), called by EVAL with exact ARGV or
// through the drivers: the lease hash must outlive what it records, the line's hint must never
// hide a live place, the scripts must keep exclusion with odd holders, values and the line's
// undone grants, run when out of memory, and use the literal names the layout gives a key.

// Indexes of rediscore.Sources, for the tests that call a script with exact ARGV.
const (
	srcAcquire = 0
	srcExtend  = 1
	srcRelease = 2
	srcInspect = 3
	srcLeave   = 4
)

// One more index of rediscore.Sources: watch.lua.
const srcWatch = 5

// script runs the script Sources[i] on key with args by EVAL, and fails t on an error.
func script(t *testing.T, c *redis.Client, i int, key string, args ...any) any {
	t.Helper()
	r, err := c.Eval(context.Background(), rediscore.Sources[i], rediscore.Keys(key), args...).Result()
	if err != nil {
		t.Fatalf("script %d on %q %v: %v", i, key, args, err)
	}
	return r
}

// acquireArgv is the acquire script's ARGV, up to the value (no fence floors). A try that waits
// is told on the channel of the Store its try id names (rediscore.Channel(key, store) for
// "<store>:<n>").
func acquireArgv(holder string, permits, limit int, ttl, wait time.Duration, listens bool, try, value string) []any {
	l := "0"
	if listens {
		l = "1"
	}
	return []any{holder, ttl.Milliseconds(), wait.Milliseconds(), try, l, permits, limit, value}
}

// asArray is a reply of the acquire or release script as an array: a grant (the fence alone)
// as {1, fence}, a release that granted the line nothing (the permits freed alone) as {permits}.
func asArray(src int, r any) []any {
	if n, ok := r.(int64); ok {
		if src == srcAcquire {
			return []any{int64(1), n}
		}
		return []any{n}
	}
	return r.([]any)
}

// fullAcquireArgv is the acquire script's whole ARGV, every value sent, defaults included.
func fullAcquireArgv(holder string, n, limit int, ttl, wait int64, try, listens, value string, minFence, floor int64) []any {
	return []any{holder, ttl, wait, try, listens, n, limit, value, minFence, floor}
}

// trimmedAcquireArgv is full (see fullAcquireArgv, with or without a lock delay after it) as a
// Store sends it: without the values at its end that are their defaults (0, "", "0", 1, 1, "", 0,
// 0, 0 from the third on).
func trimmedAcquireArgv(full []any) []any {
	defaults := []any{int64(0), "", "0", 1, 1, "", int64(0), int64(0), int64(0)}
	n := len(full)
	for n > 2 && full[n-1] == defaults[n-3] {
		n--
	}
	return full[:n]
}

// TestRequeueWithALongerWaitKeepsTheHash: a waiter whose retry keeps its place but waits longer
// than its first try (a holder id shared by two acquires, a new timeout) extends the line; the
// lease hash, which holds the line's place counter and its hint, must live past the line, or a
// newcomer would find no line once it expired, and take places ahead of the waiters.
func TestRequeueWithALongerWaitKeepsTheHash(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: "longer", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait}
			}
			mustAcquire(t, s, req("a", 0), true)
			mustAcquire(t, s, req("w", time.Minute), false)
			mustAcquire(t, s, req("w", 30*24*time.Hour), false)
			if n := lineLen(t, srv.Addr, "longer"); n != 1 {
				t.Fatalf("%d places, want w's one", n)
			}
			if hash, line := expiresAt(t, c, "longer", 0), expiresAt(t, c, "longer", 1); hash < line {
				t.Errorf("the lease hash expires at %d ms, the line at %d: the place counter and the line's hint would go first", hash, line)
			}
			if cs := countersOf(t, c, "longer"); cs.keep < cs.line {
				t.Errorf("counters keep %d, line %d: keep must be past the line", cs.keep, cs.line)
			}
		})
	}
}

// TestNewcomerDoesNotJumpALineThatOutlivedItsFirstWait: on miniredis, whose clock the test
// moves: a holder holds for three weeks, w waits a minute, then (a second acquire of its id)
// three weeks. Eight days on, past what its first wait kept the line and the lease hash for,
// the holder releases: w is granted from the line, and a newcomer is refused.
func TestNewcomerDoesNotJumpALineThatOutlivedItsFirstWait(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	s := redisharness.GoRedis(t, m.Addr())
	req := func(holder string, ttl, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: "jump", Holder: holder, Permits: 1, Limit: 1, TTL: ttl, Wait: wait}
	}
	a := mustAcquire(t, s, req("a", 21*24*time.Hour, 0), true)
	mustAcquire(t, s, req("w", time.Minute, time.Minute), false)
	mustAcquire(t, s, req("w", time.Minute, 21*24*time.Hour), false)
	d := 8 * 24 * time.Hour
	m.SetTime(now.Add(d))
	m.FastForward(d)
	if _, err := s.Release(context.Background(), core.ReleaseRequest{Key: "jump", Holder: "a", Fence: a.Fence}); err != nil {
		t.Fatal(err)
	}
	if snap, err := s.Inspect(context.Background(), "jump"); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "w" {
		t.Errorf("after the release: %+v, %v; want w's grant from the line", snap, err)
	}
	res, err := s.Acquire(context.Background(), req("newcomer", time.Minute, 0))
	if err != nil || res.Granted {
		t.Errorf("a newcomer while w waits: %+v, %v; want refused", res, err)
	}
}

// TestInspectDeletesNothing: Inspect (a no-writes function) lists only unexpired leases and
// leaves an expired one's entry where it was: it is the next writing call that deletes it.
func TestInspectDeletesNothing(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			// gone's short lease is the last write: a write after its expiry would delete it.
			mustAcquire(t, s, core.AcquireRequest{Key: "ro", Holder: "here", Permits: 1, Limit: 2, TTL: time.Minute}, true)
			mustAcquire(t, s, core.AcquireRequest{Key: "ro", Holder: "gone", Permits: 1, Limit: 2, TTL: 20 * time.Millisecond}, true)
			expired(t, s, "ro", "gone")
			snap, err := s.Inspect(context.Background(), "ro")
			if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != "here" {
				t.Fatalf("Inspect = %+v, %v; want here's lease alone", snap, err)
			}
			if h := holdersOf(t, c, "ro"); len(h) != 2 {
				t.Errorf("after Inspect the hash holds %q; want the expired entry still there", h)
			}
			mustAcquire(t, s, core.AcquireRequest{Key: "ro", Holder: "here", Permits: 1, Limit: 2, TTL: time.Minute}, true)
			if h := holdersOf(t, c, "ro"); len(h) != 1 {
				t.Errorf("after a renewal the hash holds %q; want the expired entry deleted", h)
			}
		})
	}
}

// TestCounterLikeHoldersAndOddValues: holders named like the hash's counters, empty, starting
// with ':', or not ASCII, with values holding newlines, " q", digits and NULs, exclude each
// other on a mutex, read back as they were stored, and release only their own lease.
func TestCounterLikeHoldersAndOddValues(t *testing.T) {
	t.Parallel()
	holders := []string{"fence", "keep", "line", "", ":", ":x", "q", "1 2 3", "é\x00\n"}
	values := []string{" q", "\n", "1 2 3 q\nx", "\x00", "", "q\n q", "fence", "\n\n", "é"}
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			req := func(i int) core.AcquireRequest {
				return core.AcquireRequest{Key: "odd", Holder: holders[i], Permits: 1, Limit: 1, TTL: time.Minute, Value: values[i]}
			}
			for i := range holders {
				res := mustAcquire(t, s, req(i), true)
				for j := range holders {
					if j != i {
						mustAcquire(t, s, req(j), false)
					}
				}
				snap, err := s.Inspect(ctx, "odd")
				if err != nil || len(snap.Leases) != 1 || snap.Leases[0].Holder != holders[i] || snap.Leases[0].Value != values[i] || snap.Leases[0].Fence != res.Fence {
					t.Fatalf("Inspect with %q holding %q = %+v, %v", holders[i], values[i], snap, err)
				}
				ext, err := s.Extend(ctx, core.ExtendRequest{Key: "odd", Holder: holders[i], TTL: time.Minute})
				if err != nil || ext.Value != values[i] || ext.Fence != res.Fence {
					t.Fatalf("Extend of %q = %+v, %v; want value %q, fence %d", holders[i], ext, err, values[i], res.Fence)
				}
				for j := range holders {
					if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "odd", Holder: holders[j]}); err != nil || ok != (i == j) {
						t.Fatalf("Release of %q while %q holds: %v, %v", holders[j], holders[i], ok, err)
					}
				}
			}
		})
	}
}

// TestUnheardGrantIsUndoneAndTheNextServed: a release grants the head, whose Store is said to
// listen but the PUBLISH reaches nobody: the grant is undone, every later place of that channel
// passed over, and the next waiter granted, the only lease; a watcher of the key hears the change.
func TestUnheardGrantIsUndoneAndTheNextServed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	const key = "unheard"
	changed := strings.TrimSuffix(rediscore.Keys(key)[0], "lease") + "changed"
	heard := rediscore.Channel(key, "heard")
	sub := c.Subscribe(ctx, changed, heard)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	acq := func(holder string, wait time.Duration, store string, listens bool) []any {
		return asArray(srcAcquire, script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, time.Minute, wait, listens, store+":1", "v")...))
	}
	script(t, c, 5, key, time.Minute.Milliseconds()) // watch.lua
	if r := acq("a", 0, "", false); r[0].(int64) != 1 {
		t.Fatalf("a: %v", r)
	}
	acq("deaf1", time.Minute, "nobody", true)
	acq("deaf2", time.Minute, "nobody", true)
	acq("w", time.Minute, "heard", true)
	msgs := sub.Channel()
	for len(msgs) > 0 {
		<-msgs
	}
	r := asArray(srcRelease, script(t, c, srcRelease, key, "a", 0))
	if len(r) != 3 || r[0].(int64) != 1 || r[1] != "w" {
		t.Fatalf("release = %v; want 1 permit freed and w granted", r)
	}
	snap := script(t, c, srcInspect, key).([]any)
	if snap[1].(int64) != 1 || snap[2].(int64) != 0 || snap[3] != "w" || len(snap) != 8 {
		t.Errorf("inspect = %q; want w's lease alone and an empty line", snap)
	}
	got := map[string]bool{}
	for !got[heard] || !got[changed] {
		select {
		case m := <-msgs:
			got[m.Channel] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("heard %v; want w's grant and the key's change", got)
		}
	}
}

// TestScriptsWithoutFlagsReleaseAndLeaveWhenOutOfMemory: the scripts as EVALSHA runs them (no
// flags: Redis refuses only a first write that may grow memory) release, grant the line's head,
// and leave with a try id when maxmemory is full; a new grant is refused with OOM and changes
// nothing.
func TestScriptsWithoutFlagsReleaseAndLeaveWhenOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	const key = "oom-eval"
	acq := func(holder string, wait time.Duration) []any {
		return asArray(srcAcquire, script(t, c, srcAcquire, key, acquireArgv(holder, 1, 1, time.Minute, wait, false, "", "")...))
	}
	if r := acq("a", 0); r[0].(int64) != 1 {
		t.Fatalf("a: %v", r)
	}
	for _, h := range []string{"b", "c", "d"} {
		acq(h, time.Minute)
	}
	do(t, srv.Addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "1")
	t.Cleanup(func() { redistest.Do(srv.Addr, "CONFIG", "SET", "maxmemory", "0") })
	args := acquireArgv("x", 1, 1, time.Minute, 0, false, "", "")
	if _, err := c.Eval(ctx, rediscore.Sources[srcAcquire], rediscore.Keys("oom-other"), args...).Result(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("a grant when out of memory: %v; want OOM", err)
	}
	if n, _ := c.Exists(ctx, rediscore.Keys("oom-other")...).Result(); n != 0 {
		t.Fatalf("a refused grant left %d keys", n)
	}
	if r := asArray(srcRelease, script(t, c, srcRelease, key, "a", 0)); len(r) != 3 || r[1] != "b" {
		t.Fatalf("release when out of memory = %v; want b granted", r)
	}
	script(t, c, srcLeave, key, "c", 0, "try-c", 60000)
	if r := asArray(srcRelease, script(t, c, srcRelease, key, "b", 0)); len(r) != 3 || r[1] != "d" {
		t.Fatalf("release of b when out of memory = %v; want d granted (c left)", r)
	}
	if h := holdersOf(t, c, key); len(h) != 1 || !strings.HasSuffix(h["d"], " q") {
		t.Errorf("holders %q; want d's untaken grant alone", h)
	}
	if n := lineLen(t, srv.Addr, key); n != 0 {
		t.Errorf("%d places left", n)
	}
}

// TestScriptsUseTheLiteralNamesOfAnOddKey: under a prefix with '%' and UTF-8, a key with braces,
// '%', NUL and UTF-8 is stored under exactly the Redis keys the layout names (prefix, "{", the
// escaped key, "}:", the name), and the scripts publish its changes on exactly the changed
// channel a Watch subscribes to: a plain subscriber of that literal name hears them, and so
// does the Watch.
func TestScriptsUseTheLiteralNamesOfAnOddKey(t *testing.T) {
	t.Parallel()
	const key = "a{b}%c☃\x00 x"
	const tag = "app%☃:{a%7Bb%7D%25c☃\x00 x}:"
	const prefix = "app%☃:"
	for name, mk := range map[string]func(t *testing.T, addr string) redisharness.Store{
		"goredis": func(t *testing.T, addr string) redisharness.Store {
			c := redis.NewClient(&redis.Options{Addr: addr})
			s, err := goredis.New(c, goredis.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); c.Close() })
			return s
		},
		"valkey": func(t *testing.T, addr string) redisharness.Store {
			c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}})
			if err != nil {
				t.Fatal(err)
			}
			s, err := valkey.New(c, valkey.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); c.Close() })
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c, ctx := mk(t, srv.Addr), raw(t, srv.Addr), context.Background()
			sub := c.Subscribe(ctx, tag+"changed")
			defer sub.Close()
			if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
				t.Fatal(err)
			}
			w, err := s.Watch(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			poll.Until(t, "the watch to be reliable", w.Reliable)
			drain(w)
			req := func(holder string) core.AcquireRequest {
				return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			}
			mustAcquire(t, s, req("a"), true)
			select {
			case m := <-sub.Channel():
				if m.Channel != tag+"changed" {
					t.Fatalf("heard on %q, want %q", m.Channel, tag+"changed")
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("nothing published on %q after a grant on a watched key", tag+"changed")
			}
			select {
			case <-w.C():
			case <-time.After(5 * time.Second):
				t.Fatal("the Watch was not woken by the grant")
			}
			mustAcquire(t, s, req("b"), false)
			for _, k := range []string{"lease", "queue", "waiting"} {
				if n, err := c.Exists(ctx, tag+k).Result(); err != nil || n != 1 {
					t.Errorf("EXISTS %q = %d, %v; want 1", tag+k, n, err)
				}
			}
			if n, _ := c.DBSize(ctx).Result(); n != 3 {
				t.Errorf("DBSIZE %d, want the key's 3 keys only", n)
			}
		})
	}
}
