package rediscore_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// loadDuration is how long each load test runs: 3 s, or 30 s under LEASEHOLD_SOAK=1. The
// tests measure memory at a third of the run and at its end, so they run one at a time (no
// t.Parallel: another test's goroutines and heap would count).
func loadDuration() time.Duration { return testenv.Pick(3*time.Second, 10*time.Second) }

// load runs 200 mutex holders over 10 keys, each holder with a Store of its own on client,
// checks the history (exclusion and fences; the history is too long for the linearizability
// search) and that memory stays flat: the Go heap and goroutines in this process, and the
// server's used_memory, measured at a third of the run and at its end.
func load(t *testing.T, client redis.UniversalClient, addrs []string) {
	w := &history.Workload{Keys: 10, Workers: 200, TTL: 2 * time.Second, Duration: loadDuration(), CallBudget: 5 * time.Second,
		NewStore: func() core.Store {
			s, err := goredis.New(client)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}}
	type sample struct {
		heap       uint64
		goroutines int
		server     int64
	}
	measure := func() sample {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := sample{heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine()}
		for _, a := range addrs {
			s.server += usedMemory(t, a)
		}
		return s
	}
	var early sample
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(t)
	}()
	time.Sleep(loadDuration() / 3)
	early = measure()
	<-done
	late := measure()
	ops := w.Recorder.Ops()
	if v := append(history.Exclusive(ops), history.FencesIncrease(ops)...); len(v) > 0 {
		t.Errorf("%d violations, first: %v", len(v), v[0])
	}
	// The recorder itself grows with the run; the rest must not.
	recorded := uint64(len(ops)) * 256
	if late.heap > early.heap+recorded+64<<20 {
		t.Errorf("Go heap grew from %d to %d bytes (the history accounts for about %d)", early.heap, late.heap, recorded)
	}
	if late.goroutines > early.goroutines+50 {
		t.Errorf("goroutines grew from %d to %d", early.goroutines, late.goroutines)
	}
	if late.server > early.server+16<<20 {
		t.Errorf("server memory grew from %d to %d bytes", early.server, late.server)
	}
	t.Logf("%v, 200 holders, 10 keys: %d store operations, 0 violations; heap %d → %d B, goroutines %d → %d, server %d → %d B",
		loadDuration(), len(ops), early.heap, late.heap, early.goroutines, late.goroutines, early.server, late.server)
}

func usedMemory(t *testing.T, addr string) int64 {
	info, err := redistest.Do(addr, "INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory of %s", addr)
	return 0
}

func TestLoadOnServer(t *testing.T) {
	testenv.SkipShort(t, "soak")
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	load(t, c, []string{srv.Addr})
}

func TestLoadOnCluster(t *testing.T) {
	testenv.SkipShort(t, "soak")
	addrs := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	load(t, c, addrs)
}
