package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
)

// TestScriptsUseTheLiteralNamesOfAnOddKey: under a prefix with '%' and UTF-8, a key with braces,
// '%', NUL and UTF-8 is stored under exactly the Redis keys the layout names (prefix, "{", the
// escaped key, "}:", the name), and the scripts publish its changes on exactly the changed
// channel a Watch subscribes to: a plain subscriber of that literal name hears them, and so
// does the Watch.
func TestScriptsUseTheLiteralNamesOfAnOddKey(t *testing.T) {
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
			pollUntil(t, w.Reliable)
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
