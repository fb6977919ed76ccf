package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestCanceledTryLeavesNoOrphanPlace: a caller whose ctx ends while its first refused try is in
// flight leaves no place in the line that nobody owns: the holder's release then frees the lock
// (nobody is handed it), and the line is empty.
func TestCanceledTryLeavesNoOrphanPlace(t *testing.T) {
	testenv.SkipShort(t, "slows the link to redis-server to 300 ms (a fault proxy)")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			proxy := redistest.StartProxy(t, srv.Addr)
			ctx := context.Background()
			holder, _ := primitives.NewMutex(mk(t, srv.Addr), "orphan", primitives.WithTTL(time.Minute))
			l, err := holder.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			slow := mk(t, proxy.Addr)
			waiter, _ := primitives.NewMutex(slow, "orphan", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
			warm, _ := primitives.NewMutex(slow, "warm-up")
			if wl, err := warm.Acquire(ctx); err == nil {
				wl.Release(ctx) // connections and scripts ready: the try below is one command
			}
			proxy.SetLatency(300 * time.Millisecond)
			// Canceled, as by a client that hangs up: no deadline bounds the place the try takes.
			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(100*time.Millisecond, cancel)
			if _, err := waiter.Acquire(cctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire with a ctx canceled during the try: %v, want Canceled", err)
			}
			// The leave that follows the try reaches the server after it here (the try went
			// first, on a link as slow); on another connection it may overtake the try, which
			// then takes no place. Either way the line is empty once the leave has run.
			poll.Until(t, "the try's leave recorded", func() bool { return zcard(t, srv.Addr, "orphan", 3) == 1 })
			if n := lineLen(t, srv.Addr, "orphan"); n != 0 {
				t.Fatalf("the line has %d places after the canceled try and its leave, want none", n)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if snap, _ := holder.Inspect(ctx); len(snap.Leases) != 0 {
				t.Fatalf("after the holder's release the lock is held by %+v, want nobody: the caller had gone", snap.Leases)
			}
		})
	}
}

// TestLapsedPlacesAtTheHeadDoNotBlockTheLine: more lapsed places than a release reads at once
// (64) stand at the head of the line; a release still grants the live waiter behind them.
func TestLapsedPlacesAtTheHeadDoNotBlockTheLine(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			req := func(holder string, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: "lapsed", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait}
			}
			mustAcquire(t, s, req("holder", 0), true)
			for i := range 100 {
				mustAcquire(t, s, req(fmt.Sprint("gone-", i), 50*time.Millisecond), false)
			}
			mustAcquire(t, s, req("live", time.Minute), false)
			// The 100 places lapse: their waits were 50ms, by the server's clock.
			poll.Until(t, "the 100 places lapsed", func() bool {
				snap, err := s.Inspect(ctx, "lapsed")
				return err == nil && len(snap.Waiters) == 1
			})
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: "lapsed", Holder: "holder"}); err != nil {
				t.Fatal(err)
			}
			snap, _ := s.Inspect(ctx, "lapsed")
			if len(snap.Leases) != 1 || snap.Leases[0].Holder != "live" {
				t.Fatalf("after the release, leases %+v, want the live waiter's behind 100 lapsed places", snap.Leases)
			}
			if n := lineLen(t, srv.Addr, "lapsed"); n != 0 {
				t.Errorf("the line still has %d places, want none", n)
			}
		})
	}
}

// TestNewcomerDoesNotPassTheLine: permits freed by expiry go to the waiter in line, not to a
// newcomer who finds them free first.
func TestNewcomerDoesNotPassTheLine(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			req := func(holder string, ttl, wait time.Duration) core.AcquireRequest {
				return core.AcquireRequest{Key: "expiry", Holder: holder, Permits: 1, Limit: 1, TTL: ttl, Wait: wait}
			}
			mustAcquire(t, s, req("holder", 2*time.Second, 0), true)
			mustAcquire(t, s, req("waiter", time.Minute, time.Minute), false)
			poll.Until(t, "the holder's lease expired", func() bool {
				snap, _ := s.Inspect(context.Background(), "expiry")
				return len(snap.Leases) == 0 || snap.Leases[0].Holder != "holder"
			})
			mustAcquire(t, s, req("newcomer", time.Minute, 0), false)
			mustAcquire(t, s, req("waiter", time.Minute, time.Minute), true)
		})
	}
}

// places returns the requests of the waiters in key's line, as stored.
func places(t *testing.T, addr, key string) []string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	v, err := c.HVals(context.Background(), rediscore.Keys(key)[2]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDeadWaitersArePassedOver: a process with 10 goroutines waiting in line (TTL 30s, acquire
// timeout 10 min) is killed; the holder releases; a live waiter in another process has the
// lock within 10s (so long only for a loaded machine's stalls), not after the dead waiters' TTLs.
func TestDeadWaitersArePassedOver(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			const key = "dead"
			ctx := context.Background()
			m, _ := primitives.NewMutex(mk(t, srv.Addr), key, primitives.WithTTL(30*time.Second))
			held, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			child := exec.Command(os.Args[0], "-test.run=^TestHelperDeadWaiters$", "-test.count=1")
			child.Env = append(os.Environ(), "LEASEHOLD_DEAD_WAITERS="+srv.Addr, "LEASEHOLD_DRIVER="+name)
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { child.Wait(); close(exited) }()
			t.Cleanup(func() { child.Process.Kill(); <-exited })
			// Ten places, each taken after the child's subscription was confirmed (checked ones).
			poll.Until(t, "ten checked places of the child's", func() bool {
				ps := places(t, srv.Addr, key)
				checked := 0
				for _, p := range ps {
					if f := strings.Fields(p); len(f) >= 7 && f[5] == "1" {
						checked++
					}
				}
				return checked == 10
			})
			var channel string
			if f := strings.Fields(places(t, srv.Addr, key)[0]); len(f) >= 7 {
				channel = f[6]
			}
			live, _ := primitives.NewMutex(mk(t, srv.Addr), key, primitives.WithTTL(30*time.Second), primitives.WithAcquireTimeout(10*time.Minute))
			got := acquireInBackground(t, live)
			poll.Until(t, "the live waiter in line behind them", func() bool { return lineLen(t, srv.Addr, key) == 11 })
			child.Process.Kill()
			<-exited
			// The server has seen the dead process's connection close.
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer c.Close()
			poll.Until(t, "the dead process's subscription gone", func() bool {
				v, err := c.PubSubNumSub(ctx, channel).Result()
				return err == nil && v[channel] == 0
			})
			start := time.Now()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case l := <-got:
				t.Logf("a live waiter behind 10 dead ones had the lock %v after the release", time.Since(start))
				if l != nil {
					l.Release(ctx)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the live waiter did not have the lock within 10s of the release; line %d", lineLen(t, srv.Addr, key))
			}
		})
	}
}

// TestHelperDeadWaiters is the process TestDeadWaitersArePassedOver kills: ten goroutines
// waiting for the lock.
func TestHelperDeadWaiters(t *testing.T) {
	addr := os.Getenv("LEASEHOLD_DEAD_WAITERS")
	if addr == "" {
		t.Skip("run by TestDeadWaitersArePassedOver")
	}
	s := redisharness.Drivers[os.Getenv("LEASEHOLD_DRIVER")](t, addr)
	m, _ := primitives.NewMutex(s, "dead", primitives.WithTTL(30*time.Second), primitives.WithAcquireTimeout(10*time.Minute))
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, err := m.Acquire(context.Background())
			if err != nil && !errors.Is(err, core.ErrClosed) {
				t.Error(err)
			}
		})
	}
	wg.Wait() // killed before
}
