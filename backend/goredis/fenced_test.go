package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestFencedWritesRefuseAStaleFence: a write with the current fence lands, one with an older
// fence is refused and changes nothing, and the same fence writes again.
func TestFencedWritesRefuseAStaleFence(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	write := func(fence uint64, v string) error {
		return s.Fenced(ctx, "account-7", fence, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, "balance", v, 0)
			pipe.RPush(ctx, "log", v)
			return nil
		})
	}
	for _, step := range []struct {
		fence uint64
		value string
		stale bool
	}{{5, "a", false}, {3, "b", true}, {5, "c", false}, {9, "d", false}, {8, "e", true}, {9, "f", false}} {
		err := write(step.fence, step.value)
		if got := errors.Is(err, core.ErrStaleFence); got != step.stale {
			t.Fatalf("write %s with fence %d: %v, want stale %v", step.value, step.fence, err, step.stale)
		}
		if step.stale && !errors.Is(err, core.ErrLost) {
			t.Errorf("a stale fence's error %v does not wrap core.ErrLost", err)
		}
		if !step.stale && err != nil {
			t.Fatal(err)
		}
	}
	if v := c.Get(ctx, "balance").Val(); v != "f" {
		t.Errorf("balance %q, want f: a stale write landed or a fresh one was lost", v)
	}
	if log := c.LRange(ctx, "log", 0, -1).Val(); fmt.Sprint(log) != "[a c d f]" {
		t.Errorf("log %v, want [a c d f]", log)
	}
}

// TestFencedWriteSendsNothingWhenFnFails: fn's error is returned as it is, and neither fn's
// commands nor the record are written.
func TestFencedWriteSendsNothingWhenFnFails(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s, _ := goredis.New(c)
	defer s.Close()
	ctx := context.Background()
	boom := errors.New("boom")
	err := s.Fenced(ctx, "r", 7, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, "x", "1", 0)
		return boom
	})
	if err != boom {
		t.Fatalf("Fenced: %v, want fn's error as it is", err)
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys after a fenced write whose fn failed, want 0", n)
	}
	for _, fence := range []uint64{0, 1 << 63} {
		if err := s.Fenced(ctx, "r", fence, func(redis.Pipeliner) error { return nil }); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("fence %d: %v, want ErrInvalid", fence, err)
		}
	}
	if err := s.Fenced(ctx, "r", 1, nil); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("nil fn: %v, want ErrInvalid", err)
	}
}

// TestConcurrentFencedWritersLeaveTheHighestFencesWrite: writers with fences 1..20 racing on one
// resource: whatever their order, the value left is the highest fence's, and no write landed
// after a higher one (the log rises).
func TestConcurrentFencedWritersLeaveTheHighestFencesWrite(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s, _ := goredis.New(c)
	defer s.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for fence := uint64(1); fence <= 20; fence++ {
		wg.Go(func() {
			err := s.Fenced(ctx, "r", fence, func(pipe redis.Pipeliner) error {
				pipe.Set(ctx, "v", fence, 0)
				pipe.RPush(ctx, "log", fence)
				return nil
			})
			if err != nil && !errors.Is(err, core.ErrStaleFence) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if v := c.Get(ctx, "v").Val(); v != "20" {
		t.Errorf("value %q, want the highest fence's, 20", v)
	}
	log, _ := c.LRange(ctx, "log", 0, -1).Result()
	for i := 1; i < len(log); i++ {
		var a, b int
		fmt.Sscan(log[i-1], &a)
		fmt.Sscan(log[i], &b)
		if b < a {
			t.Fatalf("write of fence %d landed after fence %d: %v", b, a, log)
		}
	}
}

// TestFencedWritesOnAClusterStayInTheRecordsSlot: on a Cluster, keys named with FenceTag are
// written with the record in one transaction and a stale fence is refused; a key in another slot
// fails the write, and nothing of it lands.
func TestFencedWritesOnAClusterStayInTheRecordsSlot(t *testing.T) {
	testenv.SkipShort(t, "starts a Redis Cluster")
	t.Parallel()
	addrs := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, resource := range []string{"account-1", "account-2", "account-3", "account-4"} { // records on several nodes
		key := s.FenceTag(resource) + "balance"
		write := func(fence uint64, v string) error {
			return s.Fenced(ctx, resource, fence, func(pipe redis.Pipeliner) error {
				pipe.Set(ctx, key, v, 0)
				return nil
			})
		}
		if err := write(7, "new"); err != nil {
			t.Fatalf("%s: a write with the first fence: %v", resource, err)
		}
		if err := write(6, "stale"); !errors.Is(err, core.ErrStaleFence) {
			t.Errorf("%s: a write with an older fence: %v, want ErrStaleFence", resource, err)
		}
		if v := c.Get(ctx, key).Val(); v != "new" {
			t.Errorf("%s: %s = %q, want new", resource, key, v)
		}
	}
	err = s.Fenced(ctx, "account-1", 8, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, s.FenceTag("account-1")+"balance", "mine", 0)
		pipe.Set(ctx, "elsewhere", "x", 0)
		return nil
	})
	if err == nil {
		t.Fatalf("a write to a key outside the record's slot succeeded, want an error")
	}
	if v := c.Get(ctx, s.FenceTag("account-1")+"balance").Val(); v != "new" || c.Exists(ctx, "elsewhere").Val() != 0 {
		t.Errorf("after the cross-slot write failed: balance %q, elsewhere exists %d; want nothing written", v, c.Exists(ctx, "elsewhere").Val())
	}
}
