package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// Close while acquires, waits, releases and inspects are in flight: each returns, with its
// answer or an error wrapping core.ErrClosed, and nothing of the Store's runs on after it (goleak
// checks that after the package's tests).
func TestCloseWithOperationsInFlight(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		key := uniqueKey(t)
		s, err := etcd.New(etcdClient(t))
		if err != nil {
			t.Fatal(err)
		}
		other := newStore(t)
		mustAcquire(t, other, req(key, "h", 1, 2))
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 12 {
			wg.Go(func() {
				h := fmt.Sprint("w", i)
				r := req(key, h, 1, 2)
				r.Wait = time.Minute
				res, err := s.Acquire(ctx, r)
				if err == nil && !res.Granted {
					var w core.Wake
					if w, err = s.Register(ctx, r); err == nil {
						select {
						case <-w.C():
						case <-time.After(100 * time.Millisecond):
						}
						w.Close()
					}
				}
				if err == nil && res.Granted {
					_, err = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: h, Fence: res.Fence})
				}
				if err == nil {
					_, err = s.Inspect(ctx, key)
				}
				if err != nil && !errors.Is(err, core.ErrClosed) {
					errs <- err
				}
			})
		}
		time.Sleep(time.Duration(round) * 5 * time.Millisecond) // the point: Close at various moments
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("an operation in flight at Close: %v; want its answer or ErrClosed", err)
		}
	}
}

// TestCloseWithEtcdGoneReturnsInAboutASecond: a Store with a session (a place in a line), a
// spare etcd lease and a leave it owes, whose etcd is then killed, returns from Close in about
// a second (nothing answers its revokes), not after its five-second wait for etcd.
func TestCloseWithEtcdGoneReturnsInAboutASecond(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	s := storeOn(t, srv)
	other := storeOn(t, srv)
	key := uniqueKey(t)
	ctx := context.Background()
	a := mustAcquire(t, s, req(key+"/spare", "a", 1, 1))
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key + "/spare", Holder: "a", Fence: a.Fence}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	mustAcquire(t, other, req(key, "h", 1, 1))
	w := mustWait(t, s, req(key, "w", 1, 1))
	srv.Kill(t)
	w.Close() // a leave that cannot be sent
	start := time.Now()
	err := s.Close()
	t.Logf("Close with etcd gone: %v", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close with etcd gone took %v, want about a second", d.Round(time.Millisecond))
	}
	if err == nil {
		t.Error("Close with etcd gone = nil; want the error of the session's revoke")
	}
}

// TestClosedClientEndsTheStoresBackgroundWork: a waiter gives up (its leave is owed) after the
// Store's client was closed, as etcd's users close clients: the leave, which could never be
// sent, ends at once instead of being tried again for minutes, the Store's Close returns at
// once, and no goroutine of the Store's outlives them.
func TestClosedClientEndsTheStoresBackgroundWork(t *testing.T) {
	srv := etcdtest.Shared(t) // started before the check, if this test is the first to use it
	noLeaks(t)                // not parallel: the check counts every goroutine of the process
	key := uniqueKey(t)
	other := newStore(t)
	mustAcquire(t, other, req(key, "h", 1, 1))
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := etcd.New(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := primitives.NewMutex(s, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx)
		done <- err
	}()
	poll.Until(t, "the waiter in line", func() bool { return len(lineOf(t, other, key)) == 1 })
	c.Close()
	cancel() // the waiter gives up: its leave is owed, on a closed client
	<-done
	start := time.Now()
	s.Close()
	t.Logf("Close after the client's: %v", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > time.Second {
		t.Errorf("the Store's Close after its client's took %v, want at once", d.Round(time.Millisecond))
	}
}

// TestCloseWithEtcdGoneAndNothingOwedReturnsInAboutASecond: a Store with a session (a place in
// a line) and a spare etcd lease, owing no background work, whose etcd is then killed, returns
// from Close in about a second (nothing answers its revokes), not after its five-second wait.
func TestCloseWithEtcdGoneAndNothingOwedReturnsInAboutASecond(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	s := storeOn(t, srv)
	other := storeOn(t, srv)
	key := uniqueKey(t)
	ctx := context.Background()
	a := mustAcquire(t, s, req(key+"/spare", "a", 1, 1))
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key + "/spare", Holder: "a", Fence: a.Fence}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	mustAcquire(t, other, req(key, "h", 1, 1))
	r := req(key, "w", 1, 1)
	r.Wait = time.Minute
	if res, err := s.Acquire(ctx, r); err != nil || res.Granted {
		t.Fatalf("Acquire(w) = %+v, %v; want a refusal, its place in line", res, err)
	}
	srv.Kill(t)
	start := time.Now()
	err := s.Close()
	t.Logf("Close with etcd gone: %v, %v", time.Since(start).Round(time.Millisecond), err)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close with etcd gone took %v, want about a second", d.Round(time.Millisecond))
	}
}
