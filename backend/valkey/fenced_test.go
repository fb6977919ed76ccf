package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// TestFencedWritesRefuseAStaleFence: a write with the current fence lands, one with an older
// fence is refused and changes nothing, and the same fence writes again; a go-redis Store's
// fenced writes share the record, so the drivers fence each other.
func TestFencedWritesRefuseAStaleFence(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr, vk.ClientOption{})
	s := storeOver(t, c)
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer gc.Close()
	gs, err := goredis.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	ctx := context.Background()
	write := func(fence uint64, v string) error {
		if fence%2 == 0 { // even fences through go-redis
			return gs.Fenced(ctx, "account-7", fence, func(pipe redis.Pipeliner) error {
				pipe.Set(ctx, "balance", v, 0)
				pipe.RPush(ctx, "log", v)
				return nil
			})
		}
		return s.Fenced(ctx, "account-7", fence, func(b vk.Builder) (vk.Commands, error) {
			return vk.Commands{b.Set().Key("balance").Value(v).Build(), b.Rpush().Key("log").Element(v).Build()}, nil
		})
	}
	for _, step := range []struct {
		fence uint64
		value string
		stale bool
	}{{5, "a", false}, {3, "b", true}, {5, "c", false}, {9, "d", false}, {8, "e", true}, {9, "f", false}, {7, "g", true}, {10, "h", false}} {
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
	if v := gc.Get(ctx, "balance").Val(); v != "h" {
		t.Errorf("balance %q, want h: a stale write landed or a fresh one was lost", v)
	}
	if log := gc.LRange(ctx, "log", 0, -1).Val(); fmt.Sprint(log) != "[a c d f h]" {
		t.Errorf("log %v, want [a c d f h]", log)
	}
}

// TestFencedWriteSendsNothingWhenFnFails: fn's error is returned as it is, and nothing is written.
func TestFencedWriteSendsNothingWhenFnFails(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := storeOver(t, newClient(t, srv.Addr, vk.ClientOption{}))
	ctx := context.Background()
	boom := errors.New("boom")
	if err := s.Fenced(ctx, "r", 7, func(vk.Builder) (vk.Commands, error) { return nil, boom }); err != boom {
		t.Fatalf("Fenced: %v, want fn's error as it is", err)
	}
	if n, err := redistest.Do(srv.Addr, "DBSIZE"); err != nil || n != ":0\r\n" {
		t.Errorf("DBSIZE %q, %v after a fenced write whose fn failed, want 0", n, err)
	}
	for _, fence := range []uint64{0, 1 << 63} {
		if err := s.Fenced(ctx, "r", fence, func(vk.Builder) (vk.Commands, error) { return nil, nil }); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("fence %d: %v, want ErrInvalid", fence, err)
		}
	}
}

// TestConcurrentFencedWritersLeaveTheHighestFencesWrite: writers with fences 1..20 racing on
// one resource leave the highest fence's value, and no write lands after a higher one.
func TestConcurrentFencedWritersLeaveTheHighestFencesWrite(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr, vk.ClientOption{})
	s := storeOver(t, c)
	ctx := context.Background()
	var wg sync.WaitGroup
	for fence := 1; fence <= 20; fence++ {
		wg.Go(func() {
			err := s.Fenced(ctx, "r", uint64(fence), func(b vk.Builder) (vk.Commands, error) {
				v := fmt.Sprint(fence)
				return vk.Commands{b.Set().Key("v").Value(v).Build(), b.Rpush().Key("log").Element(v).Build()}, nil
			})
			if err != nil && !errors.Is(err, core.ErrStaleFence) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if v, _ := c.Do(ctx, c.B().Get().Key("v").Build()).ToString(); v != "20" {
		t.Errorf("value %q, want the highest fence's, 20", v)
	}
	log, _ := c.Do(ctx, c.B().Lrange().Key("log").Start(0).Stop(-1).Build()).AsStrSlice()
	for i := 1; i < len(log); i++ {
		var a, b int
		fmt.Sscan(log[i-1], &a)
		fmt.Sscan(log[i], &b)
		if b < a {
			t.Fatalf("write of fence %d landed after fence %d: %v", b, a, log)
		}
	}
}
