package etcd_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

func measuring(t *testing.T) {
	if os.Getenv("LEASEHOLD_MEASURE") != "1" {
		t.Skip("a measurement, not a check: LEASEHOLD_MEASURE=1 runs it")
	}
}

// TestIdleWaitersTraffic measures what waiters blocked on a held lock send to etcd while they
// wait: 50 waiters, each with a client of its own, for a window of 3s (LEASEHOLD_MEASURE_WINDOW
// sets another), counted once every waiter's client has its watch. Leasehold's waiters (one
// Store each) and concurrency.Mutex's (one Session each) wait on the same server, one library
// after the other. Each sends its session lease's keep-alive, once a third of the session's TTL
// (Leasehold's Store: 10s; etcd's Session: 60s), so a window shorter than that sees some of them
// or none. Leasehold's waiters also try again when the store said the holder's lease would
// expire (its RetryAfter, up to the holder's 10s TTL), which the holder's refreshes put off: a
// window of less than 10s may see none of those tries.
func TestIdleWaitersTraffic(t *testing.T) {
	measuring(t)
	const waiters = 50
	window := 3 * time.Second
	if w := os.Getenv("LEASEHOLD_MEASURE_WINDOW"); w != "" {
		var err error
		if window, err = time.ParseDuration(w); err != nil {
			t.Fatal(err)
		}
	}
	srv := startServer(t)
	measure := func(t *testing.T, name string, hold func(ctx context.Context) func(), wait func(ctx context.Context, i int) (*counter, func(context.Context) error)) {
		ctx, cancel := context.WithCancel(foreground(context.Background()))
		defer cancel()
		release := hold(ctx)
		ns := make([]*counter, waiters)
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		for i := range waiters {
			n, lock := wait(ctx, i)
			ns[i] = n
			wg.Go(func() {
				if err := lock(ctx); err != nil && ctx.Err() == nil {
					errs <- err
				}
			})
		}
		poll.Until(t, "every waiter watching", func() bool {
			for _, n := range ns {
				if n.snapshot().sum("", "created") == 0 {
					return false
				}
			}
			return true
		})
		at := markNow(srv, ns...)
		time.Sleep(window) // the measurement's window, not a wait for a condition
		var d []tally
		total := tally{}
		for i, n := range ns {
			d = append(d, n.since(at.before[i]))
			for k, v := range d[i] {
				total[k] += v
			}
		}
		client, _ := cpuTime(os.Getpid())
		server, _ := cpuTime(srv.pid)
		recv := map[string]int{}
		for k, v := range total {
			if f := strings.Fields(k); f[2] == "recv" {
				recv[f[1]] += v
			}
		}
		t.Logf("%s: %d waiters for %v sent %d requests (%.3f/s per waiter): %v; received stream messages %v; CPU in the window: clients %v, server %v",
			name, waiters, window, total.requests(""), float64(total.requests(""))/window.Seconds()/waiters, total,
			recv, client-at.client, server-at.server)
		cancel()
		wg.Wait()
		release()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	t.Run("leasehold", func(t *testing.T) {
		mutex := func(c *clientv3.Client) *primitives.Mutex {
			m, err := primitives.NewMutex(newBenchStore(t, c), "idle", primitives.WithAcquireTimeout(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		measure(t, "leasehold", func(ctx context.Context) func() {
			c, n := countedClient(t, srv.Server)
			l, err := mutex(c).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			at := n.snapshot()
			return func() {
				t.Logf("leasehold: the holder sent %v while they waited (its refresh, every third of its 10s TTL)", n.since(at))
				l.Release(context.Background())
			}
		}, func(ctx context.Context, i int) (*counter, func(context.Context) error) {
			c, n := countedClient(t, srv.Server)
			m := mutex(c)
			return n, func(ctx context.Context) error {
				l, err := m.Acquire(ctx)
				if err == nil {
					err = fmt.Errorf("waiter %d was granted the held lock", i)
					l.Release(ctx)
				}
				return err
			}
		})
	})
	t.Run("etcd-concurrency", func(t *testing.T) {
		measure(t, "etcd-concurrency", func(ctx context.Context) func() {
			c, _ := countedClient(t, srv.Server)
			mu := concurrency.NewMutex(newSession(t, c), "idle-etcd")
			if err := mu.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			return func() { mu.Unlock(context.Background()) }
		}, func(ctx context.Context, i int) (*counter, func(context.Context) error) {
			c, n := countedClient(t, srv.Server)
			mu := concurrency.NewMutex(newSession(t, c), "idle-etcd")
			return n, func(ctx context.Context) error {
				err := mu.Lock(ctx)
				if err == nil {
					err = fmt.Errorf("waiter %d was granted the held lock", i)
					mu.Unlock(ctx)
				}
				return err
			}
		})
	})
}

// TestRoundTripsPerOperation measures the requests each Store operation sends to etcd, those
// its caller waits for and those sent in the background after it returns (awaited by closing
// the Store, whose own revoke of its session lease is not counted), and logs them as a table.
// Each operation runs on a Store of its own, on a client that counts; what sets the key up runs
// on another client.
func TestRoundTripsPerOperation(t *testing.T) {
	measuring(t)
	srv := startServer(t)
	ca, na := countedClient(t, srv.Server) // the measured operations
	cb, _ := countedClient(t, srv.Server)  // the set-up
	ctx := foreground(context.Background())
	const ttl = 10 * time.Second
	req := func(key, holder string, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: ttl, Wait: wait, Unshared: true}
	}
	other := newBenchStore(t, cb)
	hold := func(key, holder string) uint64 {
		t.Helper()
		res, err := other.Acquire(ctx, req(key, holder, 0))
		if err != nil || !res.Granted {
			t.Fatalf("set-up acquire of %s: %+v, %v", key, res, err)
		}
		return res.Fence
	}
	type row struct {
		op     string
		fg, bg tally
	}
	var rows []row
	// measure runs op on s, closes s, and records what was sent; session says whether s has a
	// session lease by then, whose revoke by Close is not the operation's.
	measure := func(name string, s *etcd.Store, session bool, op func() error) {
		t.Helper()
		before := na.snapshot()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		during := na.since(before)
		s.Close()
		after := na.since(before)
		fg, bg := tally{}, tally{}
		for k, v := range after {
			if strings.HasPrefix(k, "fg ") {
				fg[k] = during[k]
			} else if !strings.Contains(k, " Watch ") { // Close ends the Store's watches
				bg[k] = v
			}
		}
		if session {
			if bg["bg LeaseRevoke call"]--; bg["bg LeaseRevoke call"] == 0 {
				delete(bg, "bg LeaseRevoke call")
			}
		}
		rows = append(rows, row{name, fg, bg})
	}
	acquire := func(s *etcd.Store, r core.AcquireRequest, granted bool) func() error {
		return func() error {
			res, err := s.Acquire(ctx, r)
			if err == nil && res.Granted != granted {
				err = fmt.Errorf("granted %v, want %v", res.Granted, granted)
			}
			return err
		}
	}

	s := newBenchStore(t, ca)
	measure("Acquire, the key free", s, false, acquire(s, req("free", "h1", 0), true))
	hold("held", "h0")
	s = newBenchStore(t, ca)
	measure("Acquire refused, no wait", s, false, acquire(s, req("held", "h2", 0), false))
	s = newBenchStore(t, ca)
	measure("Acquire refused with a wait, the Store's first (grants its session)", s, true, acquire(s, req("held", "h3", time.Minute), false))

	// A waiter's Store W with a session already: its first wait is set-up.
	w := newBenchStore(t, ca)
	if _, err := w.Acquire(ctx, req("held", "hw", time.Minute)); err != nil {
		t.Fatal(err)
	}
	line := "line"
	lineFence := hold(line, "hl")
	before := na.snapshot()
	res, err := w.Acquire(ctx, req(line, "hw", time.Minute))
	if err != nil || res.Granted {
		t.Fatalf("a wait on the held key: %+v, %v", res, err)
	}
	fg := fgOnly(na.since(before))
	rows = append(rows, row{op: "Acquire refused with a wait, a Store with a session", fg: fg, bg: bgOnly(na.since(before))})
	before = na.snapshot()
	waiter, err := w.Register(ctx, req(line, "hw", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	poll.Until(t, "the waiter's watch", func() bool { return na.since(before).sum("", "created") > 0 })
	watch := na.since(before)
	rows = append(rows, row{op: "Register (Notifier), after a refusal through the Store", fg: fgOnly(watch), bg: watch})

	s = newBenchStore(t, ca)
	measure("Release, a waiter in line (grants it)", s, false, func() error {
		ok, err := s.Release(ctx, core.ReleaseRequest{Key: line, Holder: "hl", Fence: lineFence})
		if err == nil && !ok {
			err = fmt.Errorf("not held")
		}
		return err
	})
	select {
	case <-waiter.C():
	case <-time.After(poll.Timeout):
		t.Fatal("the waiter was not woken by the grant of the line")
	}
	measure("Acquire, the grant the line made (the woken waiter's try)", w, true, acquire(w, req(line, "hw", time.Minute), true))

	relFence := hold("release", "hr")
	s = newBenchStore(t, ca)
	measure("Release, nobody in line", s, false, func() error {
		_, err := s.Release(ctx, core.ReleaseRequest{Key: "release", Holder: "hr", Fence: relFence})
		return err
	})
	hold("extend", "he")
	s = newBenchStore(t, ca)
	measure("Extend, the same TTL", s, false, func() error {
		_, err := s.Extend(ctx, core.ExtendRequest{Key: "extend", Holder: "he", TTL: ttl})
		return err
	})
	s = newBenchStore(t, ca)
	measure("Extend, another TTL", s, false, func() error {
		_, err := s.Extend(ctx, core.ExtendRequest{Key: "extend", Holder: "he", TTL: 2 * ttl})
		return err
	})
	s = newBenchStore(t, ca)
	measure("Inspect, one lease", s, false, func() error {
		_, err := s.Inspect(ctx, "extend")
		return err
	})

	// etcd's concurrency.Mutex, for comparison: a Session, Lock of a free key, Unlock, and
	// Lock of a held key (until it watches, then after the release).
	cc, nc := countedClient(t, srv.Server)
	step := func(name string, op func() error) {
		t.Helper()
		before := nc.snapshot()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d := nc.since(before)
		rows = append(rows, row{name, fgOnly(d), bgOnly(d)})
	}
	var sess *concurrency.Session
	step("concurrency.NewSession", func() error {
		var err error
		sess, err = concurrency.NewSession(cc, concurrency.WithContext(ctx))
		return err
	})
	defer sess.Close()
	mu := concurrency.NewMutex(sess, "etcd-mutex")
	step("concurrency.Mutex Lock, the key free", func() error { return mu.Lock(ctx) })
	step("concurrency.Mutex Unlock", func() error { return mu.Unlock(ctx) })
	holder := newSession(t, cb)
	hmu := concurrency.NewMutex(holder, "etcd-mutex")
	if err := hmu.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	before = nc.snapshot()
	locked := make(chan error, 1)
	go func() { locked <- mu.Lock(ctx) }()
	poll.Until(t, "the concurrency.Mutex waiter watching", func() bool { return nc.since(before).sum("", "created") > 0 })
	d := nc.since(before)
	rows = append(rows, row{"concurrency.Mutex Lock, the key held: until it watches", fgOnly(d), bgOnly(d)})
	if err := hmu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	d = nc.since(before)
	rows = append(rows, row{"concurrency.Mutex Lock, the key held: in all, after the release", fgOnly(d), bgOnly(d)})
	mu.Unlock(ctx)

	var b strings.Builder
	b.WriteString("\n| Operation | Requests the caller waits for | In the background |\n|:---|:---|:---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d: %v | %v |\n", r.op, r.fg.requests(""), r.fg, r.bg)
	}
	t.Log(b.String())
}

// bgOnly is the background part of t, watches aside.
func bgOnly(t tally) tally {
	out := tally{}
	for k, v := range t {
		if strings.HasPrefix(k, "bg ") && !strings.Contains(k, " Watch ") {
			out[k] = v
		}
	}
	return out
}

// fgOnly is the foreground part of t.
func fgOnly(t tally) tally {
	out := tally{}
	for k, v := range t {
		if strings.HasPrefix(k, "fg ") {
			out[k] = v
		}
	}
	return out
}
