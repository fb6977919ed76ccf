package rediscore_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestInspectOfUnusedKeyCreatesNothing(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			snap, err := s.Inspect(context.Background(), "never-used")
			if err != nil || len(snap.Leases) != 0 || snap.Limit != 0 {
				t.Fatalf("Inspect of an unused key: %+v, %v", snap, err)
			}
			if n, _ := redistest.Do(srv.Addr, "DBSIZE"); n != ":0\r\n" {
				t.Errorf("Inspect created keys: DBSIZE %q", n)
			}
		})
	}
}

// TestPerEntityKeysFootprint measures what 10 000 per-entity keys (invoice:0 … invoice:9999),
// each acquired and released once through a primitives.Mutex on go-redis, leave on a fresh
// redis-server: its keys (DBSIZE) and the growth of used_memory. It logs the figures, and fails
// if any key is left. It runs only with LEASEHOLD_FOOTPRINT=1 (it takes a few seconds):
//
//	LEASEHOLD_FOOTPRINT=1 go test ./backend/internal/rediscore -run TestPerEntityKeysFootprint -v
func TestPerEntityKeysFootprint(t *testing.T) {
	t.Parallel()
	if os.Getenv("LEASEHOLD_FOOTPRINT") == "" {
		t.Skip("set LEASEHOLD_FOOTPRINT=1 to measure")
	}
	const n = 10000
	srv := redistest.StartServer(t)
	s := redisharness.GoRedis(t, srv.Addr)
	ctx := context.Background()
	// The Store's first call loads its scripts: make it before the baseline.
	warm, _ := primitives.NewMutex(s, "warm-up")
	if l, err := warm.Acquire(ctx); err != nil {
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	keys0, mem0 := footprint(t, srv.Addr)
	for i := range n {
		m, err := primitives.NewMutex(s, "invoice:"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys1, mem1 := footprint(t, srv.Addr)
	t.Logf("%d per-entity keys used once: %d Redis keys left (%d before), used_memory +%d bytes (%d → %d)",
		n, keys1-keys0, keys0, mem1-mem0, mem0, mem1)
	if keys1 != keys0 {
		t.Errorf("%d keys left after %d keys were released", keys1-keys0, n)
	}
}

// footprint returns the server's number of keys and its used_memory.
func footprint(t *testing.T, addr string) (keys, mem int) {
	t.Helper()
	size, err := redistest.Do(addr, "DBSIZE")
	if err != nil {
		t.Fatal(err)
	}
	if keys, err = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(size, ":"))); err != nil {
		t.Fatalf("DBSIZE: %q", size)
	}
	info, err := redistest.Do(addr, "INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			if mem, err = strconv.Atoi(v); err == nil {
				return keys, mem
			}
		}
	}
	t.Fatalf("INFO memory: no used_memory in %q", info)
	return 0, 0
}

// TestStoredFormat: the lease hash holds each lease at ':' + holder as "<permits> <fence>
// <expiry>" with its value after a newline, and the key's counters as entries of their own; a
// place without a value is stored as before values were, and a value follows inline; a watch
// sets its deadline in the counters.
func TestStoredFormat(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := redisharness.GoRedis(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	keys := rediscore.Keys("fmt")
	get := func(i int, field string) string {
		t.Helper()
		v, err := c.HGet(ctx, keys[i], field).Result()
		if err != nil {
			t.Fatalf("HGET %s %q: %v", keys[i], field, err)
		}
		return v
	}
	const odd = "a\nb q 1 2\x00{x}%"
	a := mustAcquire(t, s, core.AcquireRequest{Key: "fmt", Holder: "a", Permits: 1, Limit: 3, TTL: time.Minute}, true)
	b := mustAcquire(t, s, core.AcquireRequest{Key: "fmt", Holder: "b", Permits: 1, Limit: 3, TTL: time.Minute, Value: odd}, true)
	mustAcquire(t, s, core.AcquireRequest{Key: "fmt", Holder: "w", Permits: 3, Limit: 3, TTL: time.Minute, Wait: time.Minute}, false)
	mustAcquire(t, s, core.AcquireRequest{Key: "fmt", Holder: "v", Permits: 3, Limit: 3, TTL: time.Minute, Wait: time.Minute, Value: odd}, false)
	channel := regexp.QuoteMeta(rediscore.Channel("fmt", "")) + `[0-9a-f]+`
	for _, tc := range []struct {
		i            int
		field, match string
	}{
		{0, ":a", fmt.Sprintf(`^1 %d \d+$`, a.Fence)},
		{0, ":b", fmt.Sprintf(`^1 %d \d+`, b.Fence) + regexp.QuoteMeta("\n"+odd) + `$`},
		{0, "fence", fmt.Sprintf(`^%d$`, b.Fence)},
		{0, "limit", `^3$`},
		{0, "seq", `^2$`},
		{0, "line", `^[1-9]\d*$`},
		{0, rediscore.KeepField, `^[1-9]\d*$`},
		{2, "w", `^3 \d+ 3 60000 0 [01] ` + channel + `$`},
		{2, "v", fmt.Sprintf(`^3 \d+ 3 60000 0 [23] %d `, len(odd)) + regexp.QuoteMeta(odd) + channel + `$`},
	} {
		if v := get(tc.i, tc.field); !regexp.MustCompile(tc.match).MatchString(v) {
			t.Errorf("%s[%q] = %q, want it to match %s", keys[tc.i], tc.field, v, tc.match)
		}
	}
	w, err := s.Watch(ctx, "fmt")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if v := get(0, "watch"); !regexp.MustCompile(`^[1-9]\d*$`).MatchString(v) {
		t.Errorf("the watch counter is %q, want a deadline in server ms", v)
	}
	if n, err := c.HLen(ctx, keys[0]).Result(); err != nil || n != 8 {
		t.Errorf("the lease hash has %d entries (%v), want 2 leases and 6 counters (no left)", n, err)
	}
	if snap, err := s.Inspect(ctx, "fmt"); err != nil || len(snap.Leases) != 2 || snap.InUse() != 2 || len(snap.Waiters) != 2 {
		t.Errorf("Inspect of a watched key = %+v, %v; want the 2 leases and 2 waiters only", snap, err)
	}
}
