package redisdriver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redisdriver"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/backend/valkey"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}

// store is a Store of either driver that can be closed.
type store interface {
	core.Store
	core.Notifier
	Close() error
}

// drivers make a Store of each driver on the server at addr.
var drivers = map[string]func(t testing.TB, addr string) store{
	"goredis": func(t testing.TB, addr string) store {
		c := redis.NewClient(&redis.Options{Addr: addr})
		s, err := goredis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(); c.Close() })
		return s
	},
	"valkey": func(t testing.TB, addr string) store {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := valkey.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(); c.Close() })
		return s
	},
}

func TestDriversExcludeEachOther(t *testing.T) {
	srv := redistest.StartServer(t)
	a, b := drivers["goredis"](t, srv.Addr), drivers["valkey"](t, srv.Addr)
	ma, _ := primitives.NewMutex(a, "shared", primitives.WithRetryInterval(time.Millisecond))
	mb, _ := primitives.NewMutex(b, "shared", primitives.WithRetryInterval(time.Millisecond))
	occ := conformance.NewOccupancy(1)
	var grants atomic.Int32
	var last atomic.Uint64
	var wg sync.WaitGroup
	for i := range 6 {
		m := ma
		if i%2 == 1 {
			m = mb
		}
		wg.Go(func() {
			for range 40 {
				l, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				if prev := last.Swap(l.Fence()); l.Fence() <= prev {
					t.Errorf("fence %d after %d", l.Fence(), prev)
				}
				grants.Add(1)
				leave()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if occ.Peak() != 1 || grants.Load() != 240 {
		t.Errorf("go-redis and valkey-go stores on one key: %d holders at once, %d grants; want 1 and 240", occ.Peak(), grants.Load())
	}
}

func TestWakeCrossesDrivers(t *testing.T) {
	srv := redistest.StartServer(t)
	a, b := drivers["goredis"](t, srv.Addr), drivers["valkey"](t, srv.Addr)
	for _, pair := range [][2]store{{a, b}, {b, a}} {
		holder, waiter := pair[0], pair[1]
		w := watch(waiter)
		mh, _ := primitives.NewMutex(holder, "wake")
		mw, _ := primitives.NewMutex(w, "wake", primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(time.Minute))
		l, err := mh.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Duration)
		go func() {
			l2, err := mw.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			start := time.Now()
			l2.Release(context.Background())
			got <- time.Since(start)
		}()
		waitFor(t, w.settled) // the waiter enrolls and its subscription is confirmed
		l.Release(context.Background())
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("a release through one driver did not wake a waiter of the other (retry interval 1h, TTL 10s)")
		}
	}
}

// commands returns the number of commands clients have sent the server.
func commands(t *testing.T, addr string) int { return redistest.ClientCommands(t, addr) }

func TestOneRoundTripPerOperation(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			req := core.AcquireRequest{Key: "rt", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
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
			for _, op := range ops {
				before := commands(t, srv.Addr)
				if err := op.do(); err != nil {
					t.Fatalf("%s: %v", op.name, err)
				}
				if n := commands(t, srv.Addr) - before; n != 1 {
					t.Errorf("%s sent %d commands, want 1", op.name, n)
				}
			}
		})
	}
}

func TestWaiterIsSilentBetweenNotifications(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
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
			got := make(chan core.Lease, 1)
			go func() {
				l2, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
				}
				got <- l2
			}()
			waitFor(t, s.settled) // enrolled, subscribed, confirmed
			before := commands(t, srv.Addr)
			time.Sleep(time.Second) // ten default retry intervals... and the holder's refresh is 20s away
			if n := commands(t, srv.Addr) - before; n != 0 {
				t.Errorf("a waiter sent %d commands in 1s while its subscription was healthy, want 0", n)
			}
			before = commands(t, srv.Addr)
			l.Release(context.Background())
			l2 := <-got
			if n := commands(t, srv.Addr) - before; n != 2 {
				t.Errorf("one handoff cost %d commands, want 2: the release, which grants the waiter its lease, and the waiter's taking it", n)
			} else {
				t.Logf("one handoff: %d commands", n)
			}
			l2.Release(context.Background())
		})
	}
}

func TestForeignDataIsReportedAndLeftAlone(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			layout, _ := redisdriver.NewLayout(redisdriver.DefaultPrefix)
			ctx := context.Background()
			// Each of the key's Redis keys in turn holds someone else's string, among ours: a
			// lease, a line of waiters.
			for i := range layout.Keys("") {
				key := fmt.Sprint("theirs-", i)
				req := core.AcquireRequest{Key: key, Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
				if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
					t.Fatalf("setting up %q: %+v, %v", key, res, err)
				}
				req.Holder = "c"
				if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
					t.Fatalf("setting up %q: %+v, %v", key, res, err)
				}
				foreign := layout.Keys(key)[i]
				if _, err := redistest.Do(srv.Addr, "SET", foreign, "their data"); err != nil {
					t.Fatal(err)
				}
				req.Holder = "a"
				_, err := s.Acquire(ctx, req)
				if err == nil || !strings.Contains(err.Error(), `"`+key+`"`) || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), foreign) {
					t.Errorf("Acquire with %s foreign: err = %v, want one naming the key, the Redis key and the wrong type", foreign, err)
				}
				for _, op := range []func() error{
					func() error { _, err := s.Acquire(ctx, req); return err },
					func() error {
						_, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "b", TTL: time.Minute})
						return err
					},
					func() error { _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "b"}); return err },
					func() error { _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); return err },
					func() error { _, err := s.Inspect(ctx, key); return err },
				} {
					// An operation that does not touch the foreign key may succeed; one that does
					// fails with a wrong-type error.
					if err := op(); err != nil && !strings.Contains(err.Error(), "WRONGTYPE") {
						t.Errorf("an operation with %s foreign: err = %v, want nil or a wrong-type error", foreign, err)
					}
				}
				if v, _ := redistest.Do(srv.Addr, "GET", foreign); v != "their data" {
					t.Errorf("foreign data under %s became %q", foreign, v)
				}
			}
		})
	}
}

func TestServerDownIsReportedWithinDeadline(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			if _, err := s.Inspect(ctx, "down"); err != nil {
				t.Fatal(err)
			}
			redistest.Stop(srv)
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			start := time.Now()
			_, err := s.Acquire(ctx, core.AcquireRequest{Key: "down", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
			if err == nil || !strings.Contains(err.Error(), `acquire "down"`) {
				t.Errorf("Acquire with the server down: err = %v, want an error naming the operation and key", err)
			}
			if d := time.Since(start); d > 2500*time.Millisecond {
				t.Errorf("Acquire with the server down took %v, past its 2s deadline", d)
			}
		})
	}
}

func TestBracesInKeysStayInOneSlot(t *testing.T) {
	layout, _ := redisdriver.NewLayout(redisdriver.DefaultPrefix)
	seen := map[string]string{}
	for _, key := range []string{"a", "{a}", "a}", "}a", "{", "}", "%7B", "a%7D", "{a}:leases", "x}:leases", "leasehold:{a}"} {
		for _, k := range append(layout.Keys(key), layout.Channel(key, "store")) {
			if other, dup := seen[k]; dup {
				t.Errorf("keys %q and %q share the Redis key %q", key, other, k)
			}
			seen[k] = key
		}
		keys := layout.Keys(key)
		tag := func(k string) string {
			i := strings.Index(k, "{")
			j := strings.Index(k[i+1:], "}")
			return k[i+1 : i+1+j]
		}
		for _, k := range keys[1:] {
			if tag(k) != tag(keys[0]) || tag(k) == "" {
				t.Errorf("key %q: hash tags %q and %q differ or are empty", key, tag(keys[0]), tag(k))
			}
		}
	}
	if _, err := redisdriver.NewLayout("bad{"); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("prefix with a brace: err = %v, want ErrInvalid", err)
	}
}

func TestBracesInKeysOnCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(); c.Close() }()
	for _, key := range []string{"{a}", "a}b", "}", "{}", "x{y}z"} {
		m, _ := primitives.NewMutex(s, key)
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatalf("key %q on a cluster: %v", key, err)
		}
		if _, err := m.TryAcquire(context.Background()); !errors.Is(err, core.ErrNotAcquired) {
			t.Errorf("key %q: second TryAcquire err = %v, want ErrNotAcquired", key, err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("key %q: %v", key, err)
		}
	}
}

func TestNilClient(t *testing.T) {
	if _, err := goredis.New(nil); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("goredis.New(nil): %v", err)
	}
	var c *redis.Client
	if _, err := goredis.New(c); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("goredis.New((*redis.Client)(nil)): %v", err)
	}
	if _, err := valkey.New(nil); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("valkey.New(nil): %v", err)
	}
}

func TestSubscriptionSurvivesReconnect(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := watch(mk(t, srv.Addr))
			m, _ := primitives.NewMutex(s, "reconnect", primitives.WithTTL(time.Minute),
				primitives.WithAcquireTimeout(time.Minute), primitives.WithRetryInterval(20*time.Millisecond))
			l, err := m.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan core.Lease, 1)
			go func() {
				l2, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
				}
				got <- l2
			}()
			waitFor(t, s.settled) // subscribed and confirmed: there is a subscription to kill
			s.unsettle()
			if _, err := redistest.Do(srv.Addr, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
				t.Fatal(err)
			}
			// The waiter polls while the subscription is down, then the driver reconnects and
			// resubscribes, and the waiter settles and falls silent again.
			waitFor(t, s.settled)
			deadline := time.Now().Add(10 * time.Second)
			for {
				before := commands(t, srv.Addr)
				time.Sleep(300 * time.Millisecond)
				if commands(t, srv.Addr) == before {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the waiter kept polling 10s after its subscription was killed: not resubscribed")
				}
			}
			l.Release(context.Background())
			select {
			case l2 := <-got:
				l2.Release(context.Background())
			case <-time.After(5 * time.Second):
				t.Fatal("the release did not reach the waiter through the renewed subscription")
			}
		})
	}
}

func TestFencesIncreaseAcrossRestartWithoutPersistence(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			ctx := context.Background()
			var last uint64
			for i := range 3 {
				var res core.AcquireResult
				var err error
				// After a restart the client's pooled connections fail once each as it reconnects.
				for try := 0; try < 50; try++ {
					res, err = s.Acquire(ctx, core.AcquireRequest{Key: "restart", Holder: fmt.Sprint("h", i), Permits: 1, Limit: 1, TTL: time.Minute})
					if err == nil {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if err != nil || !res.Granted {
					t.Fatalf("acquire after %d restarts: %+v, %v", i, res, err)
				}
				if res.Fence <= last {
					t.Fatalf("fence %d after a restart that lost the data is not above %d", res.Fence, last)
				}
				last = res.Fence
				srv.Restart(t) // SIGKILL: no persistence, the counter is gone
			}
		})
	}
}

func TestCloseLeavesClientOpen(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Register(context.Background(), core.AcquireRequest{Key: "k", Holder: "h", Permits: 1}) // opens the subscription
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-time.After(time.Second):
		t.Error("Close did not wake the Store's waiters")
	}
	w.Close()
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Inspect(context.Background(), "k"); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Inspect after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Register(context.Background(), core.AcquireRequest{Key: "k", Holder: "h", Permits: 1}); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Register after Close: %v, want ErrClosed", err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the caller's client after Store.Close: %v", err)
	}
}

func TestInspectOfUnusedKeyCreatesNothing(t *testing.T) {
	for name, mk := range drivers {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr)
			snap, err := s.Inspect(context.Background(), "never-used")
			if err != nil || len(snap.Leases) != 0 || snap.Limit != 0 {
				t.Fatalf("Inspect of an unused key: %+v, %v", snap, err)
			}
			if n, _ := redistest.Do(srv.Addr, "DBSIZE"); n != ":0\r\n" {
				t.Errorf("Inspect created keys: DBSIZE %q", n)
			}
		})
	}
}
