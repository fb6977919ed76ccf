package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// TestTryCanceledInFlightLeavesNoPlace: a waiting try is sent to a paused server and its caller
// gives up (ctx canceled) before the answer; when the server resumes, the try and the Store's
// leave arrive in either order, and neither leaves a place in the line that nobody would take.
func TestTryCanceledInFlightLeavesNoPlace(t *testing.T) {
	testenv.SkipShort(t, "pauses a server")
	t.Parallel() // on a server of its own
	srv := pgtest.StartServer(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := newStore(t, srv.URL)
	if _, err := holder.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, srv.URL)
	// Warm the Store's connection and statements, so that the try is the only thing in flight.
	if _, err := s.Inspect(ctx, key); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(tctx, core.AcquireRequest{Key: key, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
		done <- err
	}()
	time.AfterFunc(100*time.Millisecond, cancel) // the try is on its way to the paused server by then
	err := <-done
	srv.Resume()
	if err == nil {
		t.Skip("the try was answered before the pause took hold")
	}
	snap, err := s.Inspect(ctx, key) // after the Store's own leave
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Waiters) != 0 {
		t.Errorf("a try whose caller gave up left places %+v in the line", snap.Waiters)
	}
}

// TestWaitersGivingUpPassTheLockOn: ten waiters, each with a Store of its own; every other one
// gives up (its acquire timeout ends) while the lock is held. The holder releases: the five that
// stayed each have the lock in turn, none stranded behind a place or a grant left by those that
// left.
func TestWaitersGivingUpPassTheLockOn(t *testing.T) {
	testenv.SkipShort(t, "ten Stores wait out their acquire timeouts")
	t.Parallel() // it waits out the acquire timeouts
	url, key := serverURL(t), uniqueKey(t)
	ctx := context.Background()
	hm, _ := primitives.NewMutex(newStore(t, url), key, primitives.WithTTL(time.Minute))
	held, err := hm.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted int
		gaveUp  = make(chan struct{}, 5)
	)
	for i := range 10 {
		stays := i%2 == 0
		timeout := time.Minute
		if !stays {
			timeout = time.Duration(100+50*i) * time.Millisecond
		}
		m, _ := primitives.NewMutex(newStore(t, url), key, primitives.WithTTL(time.Minute), primitives.WithAcquireTimeout(timeout),
			primitives.WithRetryInterval(time.Hour)) // only wakes explain a prompt grant
		wg.Go(func() {
			l, err := m.Acquire(ctx)
			if !stays {
				if !errors.Is(err, core.ErrNotAcquired) {
					t.Errorf("a waiter that should have given up: %v", err)
				}
				gaveUp <- struct{}{}
				return
			}
			if err != nil {
				t.Errorf("a waiter that stayed: %v", err)
				return
			}
			mu.Lock()
			granted++
			mu.Unlock()
			l.Release(ctx)
		})
	}
	for range 5 {
		<-gaveUp
	}
	held.Release(ctx)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("waiters stranded: %d of 5 had the lock", granted)
	}
}
