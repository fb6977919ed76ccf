package rediscore_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/primitives"
)

// TestPerEntityKeysFootprint measures what 10 000 per-entity keys (invoice:0 … invoice:9999),
// each acquired and released once through a primitives.Mutex on go-redis, leave on a fresh
// redis-server: its keys (DBSIZE) and the growth of used_memory. It logs the figures, and fails
// if any key is left. It runs only with LEASEHOLD_FOOTPRINT=1 (it takes a few seconds):
//
//	LEASEHOLD_FOOTPRINT=1 go test ./backend/internal/rediscore -run TestPerEntityKeysFootprint -v
func TestPerEntityKeysFootprint(t *testing.T) {
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
