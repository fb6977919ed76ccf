package rediscore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// TestAcquireWithEndedCtxWritesNothing: an Acquire whose ctx has ended before the call sends
// nothing and is followed by nothing (no leave in the background): whether it would wait or not,
// of an unshared holder or a shared one, through the Store or a Mutex, Semaphore, RWMutex,
// Election or MultiLock, it returns ctx's error and the server holds no key at all afterwards.
func TestAcquireWithEndedCtxWritesNothing(t *testing.T) {
	t.Parallel()
	eachDriverAlone(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		s := mk()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		reqs := []core.AcquireRequest{
			{Key: "ended-wait", Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute, Unshared: true},
			{Key: "ended-try", Holder: "t", Permits: 1, Limit: 1, TTL: time.Minute, Unshared: true},
			{Key: "ended-shared", Holder: "s", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute},
		}
		for _, req := range reqs {
			if res, err := s.Acquire(ctx, req); err != context.Canceled {
				t.Errorf("Acquire(%s) with a canceled ctx = %+v, %v; want context.Canceled", req.Key, res, err)
			}
			if _, err := s.(core.FenceRaiser).AcquireAbove(ctx, req, 1); err != context.Canceled {
				t.Errorf("AcquireAbove(%s) with a canceled ctx = %v; want context.Canceled", req.Key, err)
			}
		}
		m, err := primitives.NewMutex(s, "ended-mutex")
		if err != nil {
			t.Fatal(err)
		}
		sem, err := primitives.NewSemaphore(s, "ended-semaphore", 3)
		if err != nil {
			t.Fatal(err)
		}
		rw, err := primitives.NewRWMutex(s, "ended-rwmutex")
		if err != nil {
			t.Fatal(err)
		}
		el, err := primitives.NewElection(s, "ended-election")
		if err != nil {
			t.Fatal(err)
		}
		ml, err := primitives.NewMultiLock(s, []string{"ended-a", "ended-b"})
		if err != nil {
			t.Fatal(err)
		}
		calls := map[string]func() error{
			"Mutex.Acquire":        func() error { _, err := m.Acquire(ctx); return err },
			"Mutex.TryAcquire":     func() error { _, err := m.TryAcquire(ctx); return err },
			"Semaphore.Acquire":    func() error { _, err := sem.Acquire(ctx, 2); return err },
			"RWMutex.Acquire":      func() error { _, err := rw.Acquire(ctx); return err },
			"RWMutex.AcquireRead":  func() error { _, err := rw.AcquireRead(ctx); return err },
			"Election.Campaign":    func() error { _, err := el.Campaign(ctx, "v"); return err },
			"MultiLock.Acquire":    func() error { _, err := ml.Acquire(ctx); return err },
			"MultiLock.TryAcquire": func() error { _, err := ml.TryAcquire(ctx); return err },
		}
		for name, call := range calls {
			if err := call(); err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
				t.Errorf("%s with a canceled ctx = %v; want context.Canceled", name, err)
			}
		}
		// Close sends whatever leaves the Store still owes before it returns.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if n, err := redistest.Do(addr, "DBSIZE"); err != nil || strings.TrimSpace(n) != ":0" {
			keys, _ := redistest.Do(addr, "KEYS", "*")
			t.Errorf("DBSIZE after acquires with a canceled ctx = %q, %v; want no key (KEYS: %q)", n, err, keys)
		}
	})
}

// TestAcquireCanceledDuringTheLibraryLoadLeavesTheKeyFree: an Acquire whose ctx is canceled
// while the Store's first FUNCTION LOAD is on the wire returns ctx's error, on both drivers; the
// key is not left taken (another holder gets it), and the Store goes on working.
func TestAcquireCanceledDuringTheLibraryLoadLeavesTheKeyFree(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			proxy := redistest.StartProxy(t, srv.Addr)
			s := mk(t, proxy.Addr)
			arrived, deliver := proxy.HoldRequest("#!lua name=")
			defer deliver()
			ctx, cancel := context.WithCancel(context.Background())
			req := core.AcquireRequest{Key: "load", Holder: "first", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute}
			got := make(chan error, 1)
			go func() {
				_, err := s.Acquire(ctx, req)
				got <- err
			}()
			<-arrived
			cancel()
			deliver()
			if err := <-got; !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire canceled during the library load: %v; want context.Canceled", err)
			}
			req.Holder = "second"
			poll.Until(t, "the key granted to another holder", func() bool {
				res, err := s.Acquire(context.Background(), req)
				return err == nil && res.Granted
			})
		})
	}
}
