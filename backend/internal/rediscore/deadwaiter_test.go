package rediscore_test

import (
	"context"
	"errors"
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
	"github.com/leasehold/leasehold/primitives"
)

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
// lock within 2s, not after the dead waiters' TTLs.
func TestDeadWaitersArePassedOver(t *testing.T) {
	for name, mk := range redisharness.Drivers {
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
			pollUntil(t, func() bool {
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
			pollUntil(t, func() bool { return lineLen(t, srv.Addr, key) == 11 })
			child.Process.Kill()
			<-exited
			// The server has seen the dead process's connection close.
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer c.Close()
			pollUntil(t, func() bool {
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
			case <-time.After(2 * time.Second):
				t.Fatalf("the live waiter did not have the lock within 2s of the release; line %d", lineLen(t, srv.Addr, key))
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
