package rediscore_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// refusedAsLayout fails t unless err is the refusal of a layout version found, naming it and
// the version this Store speaks.
func refusedAsLayout(t *testing.T, op string, err error, found string) {
	t.Helper()
	le, ok := errors.AsType[*rediscore.LayoutError](err)
	if !errors.Is(err, rediscore.ErrLayoutVersion) || !ok || le.Found != found || le.Speaks != rediscore.LayoutVersion {
		t.Fatalf("%s: %v; want a *LayoutError wrapping ErrLayoutVersion, found %q, speaks %d", op, err, found, rediscore.LayoutVersion)
	}
	want := "of layout " + found + ", this Store speaks layout " + strconv.Itoa(rediscore.LayoutVersion)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %q; want it to say %q", op, err, want)
	}
}

// TestStoreRefusesAKeyOfAnotherLayoutAndChangesNothing: a lease hash written by another layout
// version (the name of its keep entry says so), or by a layout from before versions (a keep
// entry named "keep", beside entries of ours), is refused by every operation with an error naming both versions, and is left as it
// was, its line's keys not made.
func TestStoreRefusesAKeyOfAnotherLayoutAndChangesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	now := time.Now()
	far := strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10)
	fence := strconv.FormatInt(now.UnixMicro()-1000, 10)
	lease := "1 " + fence + " " + far
	for name, mk := range drivers(t) {
		s := mk(t, srv.Addr)
		for found, hash := range map[string]map[string]string{
			"1":    {":h": lease, "fence": fence, "limit": "1", "keep@1": far},
			"3":    {":h": lease, "fence": fence, "limit": "1", "keep@3": far, "shape": "of version 3"},
			"none": {":h": lease, "fence": fence, "limit": "1", "keep": far},
		} {
			t.Run(name+"/"+found, func(t *testing.T) {
				key := "layout:" + name + ":" + found
				ks := rediscore.Keys(key)
				if err := c.HSet(ctx, ks[0], hash).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.PExpire(ctx, ks[0], time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				for _, holder := range []string{"h", "x"} {
					_, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
					refusedAsLayout(t, "Acquire by "+holder, err, found)
				}
				_, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute})
				refusedAsLayout(t, "Extend", err, found)
				_, err = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"})
				refusedAsLayout(t, "Release", err, found)
				_, err = s.Inspect(ctx, key)
				refusedAsLayout(t, "Inspect", err, found)
				_, err = s.Watch(ctx, key)
				refusedAsLayout(t, "Watch", err, found)
				if got, err := c.HGetAll(ctx, ks[0]).Result(); err != nil || !maps.Equal(got, hash) {
					t.Fatalf("the lease hash became %q (%v); want %q untouched", got, err, hash)
				}
				if ttl := c.PTTL(ctx, ks[0]).Val(); ttl < 59*time.Minute {
					t.Fatalf("the lease hash's expiry became %v; want the hour it had", ttl)
				}
				if n := c.Exists(ctx, ks[1:]...).Val(); n != 0 {
					t.Fatalf("%d of the line's keys were made", n)
				}
			})
		}
	}
}

// TestStoreRefusesALoneLeaseOfAnotherLayoutAndChangesNothing: a lone lease's string written by
// another layout version (its tag says so) is refused by every operation with an error naming
// both versions, and is left as it was, its expiry too.
func TestStoreRefusesALoneLeaseOfAnotherLayoutAndChangesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	lone := "L@3 " + strconv.FormatInt(time.Now().UnixMicro()-1000, 10) + " 1 h"
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t, srv.Addr)
			key := "lone-layout:" + name
			ks := rediscore.Keys(key)
			if err := c.Set(ctx, ks[0], lone, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			for _, holder := range []string{"h", "x"} {
				_, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute})
				refusedAsLayout(t, "Acquire by "+holder, err, "3")
			}
			_, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute})
			refusedAsLayout(t, "Extend", err, "3")
			_, err = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h"})
			refusedAsLayout(t, "Release", err, "3")
			_, err = s.Inspect(ctx, key)
			refusedAsLayout(t, "Inspect", err, "3")
			_, err = s.Watch(ctx, key)
			refusedAsLayout(t, "Watch", err, "3")
			if got, err := c.Get(ctx, ks[0]).Result(); err != nil || got != lone {
				t.Fatalf("the lease key became %q (%v); want %q untouched", got, err, lone)
			}
			if ttl := c.PTTL(ctx, ks[0]).Val(); ttl < 59*time.Minute {
				t.Fatalf("the lease key's expiry became %v; want the hour it had", ttl)
			}
			if n := c.Exists(ctx, ks[1:]...).Val(); n != 0 {
				t.Fatalf("%d of the line's keys were made", n)
			}
		})
	}
}

// TestStoreRefusesALibraryOfAnotherLayout: a server whose Functions library is of another layout
// version refuses a Store's calls with an error naming both versions, and runs none of them; once
// that library is deleted, the Store loads its own and works.
func TestStoreRefusesALibraryOfAnotherLayout(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := raw(t, srv.Addr)
	ctx := context.Background()
	other := "#!lua name=" + rediscore.LibraryName + "\nredis.register_function{function_name = '" + rediscore.LayoutFunction +
		"', flags = {'no-writes'}, callback = function() return 3 end}\n"
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			do(t, srv.Addr, "FUNCTION", "LOAD", other)
			s := mk(t, srv.Addr)
			key := "library:" + name
			req := core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
			for range 2 {
				_, err := s.Acquire(ctx, req)
				refusedAsLayout(t, "Acquire", err, "3")
				if !strings.Contains(err.Error(), "library "+rediscore.LibraryName) {
					t.Fatalf("Acquire: %q; want it to name the library", err)
				}
			}
			if n := c.Exists(ctx, rediscore.Keys(key)...).Val(); n != 0 {
				t.Fatalf("%d of the key's Redis keys were made", n)
			}
			do(t, srv.Addr, "FUNCTION", "DELETE", rediscore.LibraryName)
			poll.Until(t, "the Store working once the other library is deleted", func() bool {
				res, err := s.Acquire(ctx, req)
				return err == nil && res.Granted
			})
		})
	}
}
