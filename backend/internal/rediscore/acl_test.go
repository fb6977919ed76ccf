package rediscore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// ACLRules is the Redis ACL a Leasehold user needs under the default prefix, as documented in
// the README: the commands the drivers send, those the scripts run, its keys and its channels.
const ACLRules = "on >secret resetkeys ~leasehold:* resetchannels &leasehold:* -@all " +
	"+hello +auth +ping +client|setname " +
	"+evalsha +eval +subscribe +unsubscribe " +
	"+time +type +get +psetex +del +pttl +hget +hset +hgetall +hmget +hdel " +
	"+zadd +zrem +zrange +zremrangebyscore +zscore +pexpire +publish"

// TestDocumentedACLIsEnough: a user with exactly the documented ACL runs contended mutexes and a
// semaphore on both drivers; a key outside the prefix is refused.
func TestDocumentedACLIsEnough(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	if reply, err := redistest.Do(srv.Addr, append([]string{"ACL", "SETUSER", "lh"}, strings.Fields(ACLRules)...)...); err != nil || !strings.HasPrefix(reply, "+OK") {
		t.Fatalf("ACL SETUSER: %q, %v", reply, err)
	}
	stores := map[string]func(prefix string) redisharness.Store{
		"goredis": func(prefix string) redisharness.Store {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "lh", Password: "secret"})
			s, err := goredis.New(c, goredis.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(); c.Close() })
			return s
		},
		"valkey": func(prefix string) redisharness.Store {
			c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr}, Username: "lh", Password: "secret", DisableCache: true})
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
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, b := mk("leasehold:"), watch(mk("leasehold:"))
			ma, _ := primitives.NewMutex(a, "acl:"+name, primitives.WithTTL(time.Second))
			mb, _ := primitives.NewMutex(b, "acl:"+name, primitives.WithTTL(time.Second), primitives.WithAcquireTimeout(5*time.Second))
			l, err := ma.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l2, err := mb.Acquire(ctx) // waits in the line, is handed the lock
				if err == nil {
					_, err = l2.Extend(ctx, time.Second)
					if err == nil {
						err = l2.Release(ctx)
					}
				}
				got <- err
			}()
			poll.Until(t, "the waiter in line and subscribed", b.settled) // in line and subscribed: the release hands it the lock
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter: %v", err)
			}
			sem, _ := primitives.NewSemaphore(a, "acl-sem:"+name, 3)
			sl, err := sem.Acquire(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if snap, err := sem.Inspect(ctx); err != nil || snap.InUse != 2 {
				t.Fatalf("Inspect: %+v, %v", snap, err)
			}
			sl.Release(ctx)
			other, _ := primitives.NewMutex(mk("other:"), "x")
			if _, err := other.TryAcquire(ctx); err == nil || errors.Is(err, core.ErrNotAcquired) {
				t.Errorf("a key outside the prefix: %v, want a permission error", err)
			}
		})
	}
}
