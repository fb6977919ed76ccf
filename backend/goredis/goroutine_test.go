package goredis_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/core"
)

// stackHook records, for each command go-redis processes, whether the goroutine sending it is
// the one running the test: a call made on the caller's goroutine has the test in its stack, a
// call made on a goroutine of its own does not.
type stackHook struct {
	test          string // the test function's name as the stack shows it
	direct, other atomic.Int64
}

func (h *stackHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *stackHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *stackHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := strings.ToLower(cmd.Name()); n == "fcall" || n == "evalsha" || n == "eval" {
			buf := make([]byte, 64<<10)
			if strings.Contains(string(buf[:runtime.Stack(buf, false)]), h.test) {
				h.direct.Add(1)
			} else {
				h.other.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}

// TestCallRunsOnTheCallersGoroutineUnlessCtxNeedsAnother: a call runs on a goroutine of its own
// only when the client would not end it by ctx's deadline: ctx has one, and the client does not
// bound calls by ctx (ContextTimeoutEnabled off), or ctx can be canceled and the client has no
// timeouts of its own. Otherwise it runs on the caller's goroutine, sparing it the goroutine's
// cost.
func TestCallRunsOnTheCallersGoroutineUnlessCtxNeedsAnother(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	client := func(o redis.Options) func(addr string) redis.UniversalClient {
		return func(addr string) redis.UniversalClient {
			o.Addr = addr
			return redis.NewClient(&o)
		}
	}
	ring := func(o redis.RingOptions) func(addr string) redis.UniversalClient {
		return func(addr string) redis.UniversalClient {
			o.Addrs = map[string]string{"a": addr}
			return redis.NewRing(&o)
		}
	}
	cases := []struct {
		name   string
		client func(addr string) redis.UniversalClient
		ctx    context.Context
		direct bool
	}{
		{"no Done, default timeouts", client(redis.Options{}), context.Background(), true},
		{"cancelable, default timeouts", client(redis.Options{}), cancelable, true},
		{"deadline, default timeouts", client(redis.Options{}), deadline, false},
		{"deadline, ContextTimeoutEnabled", client(redis.Options{ContextTimeoutEnabled: true}), deadline, true},
		{"cancelable, no read timeout", client(redis.Options{ReadTimeout: -1}), cancelable, false},
		{"cancelable, no deadlines set", client(redis.Options{ReadTimeout: -2}), cancelable, false},
		{"cancelable, no write timeout", client(redis.Options{WriteTimeout: -1}), cancelable, false},
		{"no Done, no timeouts", client(redis.Options{ReadTimeout: -1, WriteTimeout: -1}), context.Background(), true},
		// A Ring passes its timeouts to its shards' clients, which take 0 for their defaults.
		{"ring: cancelable, default timeouts", ring(redis.RingOptions{}), cancelable, true},
		{"ring: deadline, default timeouts", ring(redis.RingOptions{}), deadline, false},
		{"ring: cancelable, no read timeout", ring(redis.RingOptions{ReadTimeout: -1}), cancelable, false},
		{"ring: cancelable, no write timeout", ring(redis.RingOptions{WriteTimeout: -2}), cancelable, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := c.client(mr.Addr())
			defer client.Close()
			hook := &stackHook{test: "TestCallRunsOnTheCallersGoroutineUnlessCtxNeedsAnother"}
			client.AddHook(hook)
			s, err := goredis.New(client)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			req := core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}
			if res, err := s.Acquire(c.ctx, req); err != nil || !res.Granted {
				t.Fatalf("Acquire: %+v, %v", res, err)
			}
			if _, err := s.Release(c.ctx, core.ReleaseRequest{Key: "k", Holder: "h"}); err != nil {
				t.Fatal(err)
			}
			direct, other := hook.direct.Load(), hook.other.Load()
			if direct+other < 2 {
				t.Fatalf("saw %d script calls, want at least 2", direct+other)
			}
			if c.direct && other > 0 {
				t.Errorf("%d of %d calls ran on a goroutine of their own, want none", other, direct+other)
			}
			if !c.direct && direct > 0 {
				t.Errorf("%d of %d calls ran on the caller's goroutine, want none", direct, direct+other)
			}
		})
	}
}
