package rediscore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// Tests of operations.go through the primitives: each operation is one round trip (a waiter
// none between notifications), and each failure's error is wrapped once, on every backend.

func TestOneRoundTripPerOperation(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			req := core.AcquireRequest{Key: "rt", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute, Value: "host-a pid 4242"}
			// Warm up: connections, handshakes and script loads are paid once.
			s.Acquire(ctx, req)
			s.Extend(ctx, core.ExtendRequest{Key: "rt", Holder: "a", TTL: time.Minute})
			s.Inspect(ctx, "rt")
			s.Release(ctx, core.ReleaseRequest{Key: "rt", Holder: "a"})
			ops := []struct {
				name string
				do   func() error
			}{
				{"Acquire", func() error { _, err := s.Acquire(ctx, req); return err }},
				{"Acquire refused", func() error {
					_, err := s.Acquire(ctx, core.AcquireRequest{Key: "rt", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
					return err
				}},
				{"Extend", func() error {
					_, err := s.Extend(ctx, core.ExtendRequest{Key: "rt", Holder: "a", TTL: time.Minute})
					return err
				}},
				{"Inspect", func() error { _, err := s.Inspect(ctx, "rt"); return err }},
				{"Release", func() error { _, err := s.Release(ctx, core.ReleaseRequest{Key: "rt", Holder: "a"}); return err }},
			}
			for _, watched := range []string{"", " on a watched key"} {
				if watched != "" {
					// The scripts then PUBLISH inside the call: still one round trip each.
					w, err := s.Watch(ctx, "rt")
					if err != nil {
						t.Fatal(err)
					}
					defer w.Close()
					poll.Until(t, "the waiter to be reliable", w.Reliable)
				}
				for _, op := range ops {
					before := commands(t, srv.Addr)
					if err := op.do(); err != nil {
						t.Fatalf("%s%s: %v", op.name, watched, err)
					}
					if n := commands(t, srv.Addr) - before; n != 1 {
						t.Errorf("%s%s sent %d commands, want 1", op.name, watched, n)
					}
				}
			}
		})
	}
}

func TestWaiterIsSilentBetweenNotifications(t *testing.T) {
	testenv.SkipShort(t, "watches a waiter for a second")
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := watch(mk(t, srv.Addr))
			m, _ := primitives.NewMutex(s, "quiet", primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(time.Minute))
			warm, _ := primitives.NewMutex(s, "warm-up")
			if l, err := warm.Acquire(context.Background()); err == nil {
				l.Release(context.Background()) // load the scripts: later counts are steady state
			}
			l, err := m.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := acquireInBackground(t, m)
			poll.Until(t, "the waiter to settle", s.settled) // enrolled, subscribed, confirmed
			before := commands(t, srv.Addr)
			time.Sleep(time.Second) // ten default retry intervals... and the holder's refresh is 20s away
			if n := commands(t, srv.Addr) - before; n != 0 {
				t.Errorf("a waiter sent %d commands in 1s while its subscription was healthy, want 0", n)
			}
			before = commands(t, srv.Addr)
			l.Release(context.Background())
			l2 := <-got
			if n := commands(t, srv.Addr) - before; n != 1 {
				t.Errorf("one handoff cost %d commands, want 1: the release, which grants the waiter its lease (the waiter takes it from the message)", n)
			} else {
				t.Logf("one handoff: %d commands", n)
			}
			l2.Release(context.Background())
		})
	}
}

// closable is a Store whose tests close it to provoke core.ErrClosed.
type closable interface {
	core.Store
	Close() error
}

// redlockOver is a Redlock Store over nodes, closed by closing every node.
type redlockOver struct {
	*redlock.Store
	nodes []closable
}

func (r redlockOver) Close() error {
	for _, n := range r.nodes {
		n.Close()
	}
	return nil
}

// TestErrorsAreWrappedOnceOnEveryBackend drives the same failures through the primitives over
// memory, both Redis adapters and Redlock (over memory and over Redis), and checks every
// message: it wraps its sentinels, says "leasehold:" once, at the front, names the operation
// and the key once, and carries no driver prefix of the old form ("leasehold/…").
func TestErrorsAreWrappedOnceOnEveryBackend(t *testing.T) {
	t.Parallel()
	srv, srv2, srv3 := redistest.StartServer(t), redistest.StartServer(t), redistest.StartServer(t)
	backends := map[string]func(t *testing.T) closable{
		"memory":  func(t *testing.T) closable { return memory.New() },
		"goredis": func(t *testing.T) closable { return redisharness.GoRedis(t, srv.Addr) },
		"valkey":  func(t *testing.T) closable { return redisharness.Valkey(t, srv.Addr) },
		"redlock/memory": func(t *testing.T) closable {
			return newRedlock(t, memory.New(), memory.New(), memory.New())
		},
		"redlock/redis": func(t *testing.T) closable {
			return newRedlock(t, redisharness.GoRedis(t, srv.Addr), redisharness.Valkey(t, srv2.Addr), redisharness.GoRedis(t, srv3.Addr))
		},
	}
	ctx := context.Background()
	type failure struct {
		name string
		is   []error
		op   string // the operation the message must name, after "leasehold: "
		err  func(t *testing.T, store closable, key string) error
	}
	failures := []failure{
		{"Acquire on a closed store", []error{core.ErrClosed}, "acquire", func(t *testing.T, s closable, key string) error {
			s.Close()
			m, _ := primitives.NewMutex(s, key)
			_, err := m.Acquire(ctx)
			return err
		}},
		{"TryAcquire of a held lock", []error{core.ErrNotAcquired}, "acquire", func(t *testing.T, s closable, key string) error {
			m, _ := primitives.NewMutex(s, key)
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			_, err = m.TryAcquire(ctx)
			return err
		}},
		{"Acquire timeout", []error{core.ErrNotAcquired}, "acquire", func(t *testing.T, s closable, key string) error {
			// The holder's Acquire has no timeout: a stalled machine must not fail it.
			holder, _ := primitives.NewMutex(s, key)
			l, err := holder.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			m, _ := primitives.NewMutex(s, key, primitives.WithAcquireTimeout(50*time.Millisecond), primitives.WithRetryInterval(10*time.Millisecond))
			_, err = m.Acquire(ctx)
			return err
		}},
		{"Acquire of other permits than the holder holds", []error{core.ErrInvalid}, "acquire", func(t *testing.T, s closable, key string) error {
			sem, _ := primitives.NewSemaphore(s, key, 3, primitives.WithHolder("h"))
			l, err := sem.Acquire(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			_, err = sem.Acquire(ctx, 1)
			return err
		}},
		{"Acquire with ctx canceled", []error{context.Canceled}, "acquire", func(t *testing.T, s closable, key string) error {
			m, _ := primitives.NewMutex(s, key)
			c, cancel := context.WithCancel(ctx)
			cancel()
			_, err := m.Acquire(c)
			return err
		}},
		{"Adopt of a holder that holds nothing", []error{core.ErrNotHeld}, "adopt", func(t *testing.T, s closable, key string) error {
			sem, _ := primitives.NewSemaphore(s, key, 1)
			_, err := sem.Adopt(ctx, "nobody")
			return err
		}},
		{"Extend of a lease released behind its back", []error{core.ErrLost}, "extend", func(t *testing.T, s closable, key string) error {
			m, _ := primitives.NewMutex(s, key)
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: l.Holder(), Fence: l.Fence()}); err != nil {
				t.Fatal(err)
			}
			_, err = l.Extend(ctx, time.Minute)
			if err2 := l.Err(); !errors.Is(err2, core.ErrLost) || strings.Count(err2.Error(), "leasehold:") != 1 || !strings.HasPrefix(err2.Error(), `leasehold: extend "`) {
				t.Errorf("Err after the failed Extend: %v", err2)
			}
			return err
		}},
		{"Extend on a closed store", []error{core.ErrLost, core.ErrClosed}, "extend", func(t *testing.T, s closable, key string) error {
			m, _ := primitives.NewMutex(s, key)
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			_, err = l.Extend(ctx, time.Minute)
			return err
		}},
		{"Held on a closed store", []error{core.ErrClosed}, "held", func(t *testing.T, s closable, key string) error {
			m, _ := primitives.NewMutex(s, key)
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			_, err = l.Held(ctx)
			if err2 := l.Err(); !errors.Is(err2, core.ErrLost) || !errors.Is(err2, core.ErrClosed) || strings.Count(err2.Error(), "leasehold:") != 1 {
				t.Errorf("Err after Held on a closed store: %v", err2)
			}
			return err
		}},
		{"Release on a closed store", []error{core.ErrLost, core.ErrClosed}, "release", func(t *testing.T, s closable, key string) error {
			m, _ := primitives.NewMutex(s, key)
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			return l.Release(ctx)
		}},
		{"Release of a lease lost to a refresh", []error{core.ErrLost}, "release", func(t *testing.T, s closable, key string) error {
			// A minute's TTL (Redlock's node timeout scales with it: a short one fails calls on a
			// stalled machine), refreshed every 50 ms: the loss is made by hand below, and the
			// next refresh finds it.
			m, _ := primitives.NewMutex(s, key, primitives.WithTTL(time.Minute), primitives.WithRefreshInterval(50*time.Millisecond))
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: l.Holder(), Fence: l.Fence()}); err != nil {
				t.Fatal(err)
			}
			<-l.Done() // the next refresh finds it gone
			if err := l.Err(); !strings.HasPrefix(err.Error(), `leasehold: refresh "`+key+`": `) {
				t.Errorf("Err of a lease a refresh found gone: %v", err)
			}
			return l.Release(ctx)
		}},
	}
	for name, mk := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i, f := range failures {
				t.Run(f.name, func(t *testing.T) {
					key := "msg-" + name + "-" + string(rune('a'+i))
					err := f.err(t, mk(t), key)
					t.Logf("%s", err)
					if err == nil {
						t.Fatal("no error")
					}
					for _, is := range f.is {
						if !errors.Is(err, is) {
							t.Errorf("error %q does not wrap %v", err, is)
						}
					}
					msg := err.Error()
					if want := "leasehold: " + f.op + ` "` + key + `": `; !strings.HasPrefix(msg, want) {
						t.Errorf("error %q does not start with %q", msg, want)
					}
					if n := strings.Count(msg, "leasehold"); n != 1 {
						t.Errorf("error %q says leasehold %d times, want once", msg, n)
					}
					if n := strings.Count(msg, `"`+key+`"`); n != 1 {
						t.Errorf("error %q names the key %d times, want once", msg, n)
					}
					for _, sentinel := range []error{core.ErrClosed, core.ErrLost, core.ErrNotAcquired, core.ErrNotHeld, core.ErrInvalid} {
						if n := strings.Count(msg, sentinel.Error()); n > 1 && !strings.HasPrefix(name, "redlock") {
							t.Errorf("error %q says %q %d times", msg, sentinel, n)
						}
					}
				})
			}
		})
	}
}

func newRedlock(t *testing.T, nodes ...closable) closable {
	t.Helper()
	stores := make([]core.Store, len(nodes))
	for i, n := range nodes {
		stores[i] = n
	}
	rl, err := redlock.New(stores)
	if err != nil {
		t.Fatal(err)
	}
	return redlockOver{rl, nodes}
}
