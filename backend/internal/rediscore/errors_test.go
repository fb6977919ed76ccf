package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestForeignDataIsReportedAndLeftAlone: someone else's data under one of a key's Redis keys
// makes the operations that touch it fail with a wrong-type error naming that Redis key, and is
// left as it was.
func TestForeignDataIsReportedAndLeftAlone(t *testing.T) {
	testenv.SkipShort(t, "waits for leaves the server refuses")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			// Each of the key's Redis keys in turn holds someone else's string, among ours: a
			// lease, a line of waiters. A try that fails is left in the background, and the leave
			// fails on the foreign key (within waitline.LeaveBudget); the holder's next calls on the key,
			// every Inspect of it and the Store's Close wait for it. So every key is set up and
			// tried first, and the operations that wait come last, all keys' leaves running
			// meanwhile.
			n := len(rediscore.Keys(""))
			reqs := make([]core.AcquireRequest, n)
			for i := range n {
				key := fmt.Sprint("theirs-", i)
				req := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
				if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
					t.Fatalf("setting up %q: %+v, %v", key, res, err)
				}
				req.Holder = "c"
				if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
					t.Fatalf("setting up %q: %+v, %v", key, res, err)
				}
				foreign := rediscore.Keys(key)[i]
				if _, err := redistest.Do(srv.Addr, "SET", foreign, "their data"); err != nil {
					t.Fatal(err)
				}
				req.Holder = "a"
				_, err := s.Acquire(ctx, req)
				// A try reads left only while a leave's try ids may be in it (the counters say
				// until when), and none was ever left here: it need not touch left.
				if (i != 3 || err != nil) && (err == nil || !strings.HasPrefix(err.Error(), name+": ") || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), foreign)) {
					t.Errorf("Acquire with %s foreign: err = %v, want the driver's name, then the wrong type and the Redis key (which holds the key)", foreign, err)
				}
				reqs[i] = req
			}
			// Then each operation on every key: those of a (which wait for its leave) and the
			// Inspects (which wait for every leave of the key) last.
			ops := []func(req core.AcquireRequest) error{
				func(req core.AcquireRequest) error {
					req.Holder = "d"
					_, err := s.Acquire(ctx, req)
					return err
				},
				func(req core.AcquireRequest) error {
					_, err := s.Extend(ctx, core.ExtendRequest{Key: req.Key, Holder: "b", TTL: time.Minute})
					return err
				},
				func(req core.AcquireRequest) error {
					_, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: "b"})
					return err
				},
				func(req core.AcquireRequest) error {
					_, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: "a"})
					return err
				},
				func(req core.AcquireRequest) error { _, err := s.Inspect(ctx, req.Key); return err },
			}
			for _, op := range ops {
				for i, req := range reqs {
					// An operation that does not touch the foreign key may succeed; one that does
					// fails with a wrong-type error.
					if err := op(req); err != nil && !strings.Contains(err.Error(), "WRONGTYPE") {
						t.Errorf("an operation with %s foreign: err = %v, want nil or a wrong-type error", rediscore.Keys(req.Key)[i], err)
					}
				}
			}
			for i, req := range reqs {
				foreign := rediscore.Keys(req.Key)[i]
				if v, _ := redistest.Do(srv.Addr, "GET", foreign); v != "their data" {
					t.Errorf("foreign data under %s became %q", foreign, v)
				}
			}
		})
	}
}

// TestServerDownIsReportedWithinDeadline: with the server gone, Acquire returns the client's
// error by its ctx deadline.
func TestServerDownIsReportedWithinDeadline(t *testing.T) {
	testenv.SkipShort(t, "stops redis-server")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			if _, err := s.Inspect(ctx, "down"); err != nil {
				t.Fatal(err)
			}
			srv.Close()
			// A deadline the client's own error (connection refused, after its retries) comes
			// well within, on a loaded machine too: past it, Acquire's error is the deadline's.
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			start := time.Now()
			_, err := s.Acquire(ctx, core.AcquireRequest{Key: "down", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
			// The driver names itself; the operation and key are the caller's to add (primitives).
			if err == nil || !strings.Contains(err.Error(), name+": ") || strings.Contains(err.Error(), `"down"`) {
				t.Errorf("Acquire with the server down: err = %v, want the client's error after the driver's name, without the key", err)
			}
			if d := time.Since(start); d > 12*time.Second {
				t.Errorf("Acquire with the server down took %v, past its 10s deadline", d)
			}
		})
	}
}

// TestNilClient: New with a nil client (or a typed nil) is core.ErrInvalid, worded as every
// driver words a nil argument to its constructor: "<driver>: new: invalid argument: client: must
// not be nil".
func TestNilClient(t *testing.T) {
	var c *redis.Client
	for _, tc := range []struct {
		name, driver string
		newStore     func() error
	}{
		{"goredis.New(nil)", "goredis", func() error { _, err := goredis.New(nil); return err }},
		{"goredis.New((*redis.Client)(nil))", "goredis", func() error { _, err := goredis.New(c); return err }},
		{"valkey.New(nil)", "valkey", func() error { _, err := valkey.New(nil); return err }},
	} {
		err := tc.newStore()
		if want := tc.driver + ": new: invalid argument: client: must not be nil"; !errors.Is(err, core.ErrInvalid) || err.Error() != want {
			t.Errorf("%s: %v, want ErrInvalid reading %q", tc.name, err, want)
		}
	}
}

// TestForeignCounterValuesAreReported: someone else's hash at the lease key whose entries are
// named like the key's counters but hold what no script writes (not a whole number of ours:
// nan, inf, negative, fractional, past 2^53) is reported as foreign and left as it was. Read
// as numbers they would make a fence of NaN, granted as -2^63 and written into their hash.
func TestForeignCounterValuesAreReported(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s, c := mk(t, srv.Addr), raw(t, srv.Addr)
			ctx := context.Background()
			for _, v := range []string{"nan", "inf", "-inf", "-1", "1.5", "1e300", "9007199254740993"} {
				for _, counter := range []string{"fence", "seq", rediscore.KeepField} {
					key := "theirs-" + counter + "-" + v
					lease := rediscore.Keys(key)[0]
					if err := c.HSet(ctx, lease, counter, v).Err(); err != nil {
						t.Fatal(err)
					}
					_, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
					if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), lease) {
						t.Errorf("Acquire over their hash {%s: %s}: %v; want a wrong-type error naming %s", counter, v, err, lease)
					}
					if m, err := c.HGetAll(ctx, lease).Result(); err != nil || !reflect.DeepEqual(m, map[string]string{counter: v}) {
						t.Errorf("their hash {%s: %s} became %q (%v)", counter, v, m, err)
					}
				}
			}
		})
	}
}
