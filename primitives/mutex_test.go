package primitives_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// mustMutex returns a Mutex on the key "job", or fails the test.
func mustMutex(t *testing.T, store core.Store, opts ...primitives.Option) *primitives.Mutex {
	t.Helper()
	return mustMutexOn(t, store, "job", opts...)
}

// mustMutexOn returns a Mutex on key, or fails the test.
func mustMutexOn(t *testing.T, store core.Store, key string, opts ...primitives.Option) *primitives.Mutex {
	t.Helper()
	m, err := primitives.NewMutex(store, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mustAcquire acquires m, or fails the test.
func mustAcquire(t *testing.T, m *primitives.Mutex) core.Lease {
	t.Helper()
	l, err := m.Acquire(t.Context())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return l
}

// acquireAsync starts s.Acquire(ctx, n) on a goroutine and returns where its lease will arrive.
func acquireAsync(t *testing.T, s interface {
	Acquire(context.Context, int) (core.Lease, error)
}, n int) <-chan core.Lease {
	got := make(chan core.Lease, 1)
	go func() {
		l, err := s.Acquire(context.Background(), n)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// asSem adapts a Mutex to acquireAsync.
type asSem struct{ m *primitives.Mutex }

func (a asSem) Acquire(ctx context.Context, _ int) (core.Lease, error) { return a.m.Acquire(ctx) }

// mustRelease releases l, or fails the test.
func mustRelease(t *testing.T, l core.Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestTryAcquireReportsBusy(t *testing.T) {
	rec := newRecorder()
	m := mustMutex(t, rec)
	l := mustAcquire(t, m)
	defer mustRelease(t, l)
	before := rec.acquires.Load()
	_, err := m.TryAcquire(t.Context())
	if !errors.Is(err, core.ErrNotAcquired) || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("TryAcquire of a held mutex: err = %v, want ErrNotAcquired saying busy", err)
	}
	if n := rec.acquires.Load() - before; n != 1 {
		t.Errorf("TryAcquire made %d store calls, want 1", n)
	}
}

func TestClosedStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m := mustMutex(t, store, primitives.WithRetryInterval(time.Hour), primitives.WithAcquireTimeout(2*time.Hour))
		l := mustAcquire(t, m)
		errc := make(chan error)
		go func() {
			_, err := m.Acquire(context.Background())
			errc <- err
		}()
		synctest.Wait()
		store.Close()
		if err := <-errc; !errors.Is(err, core.ErrClosed) {
			t.Errorf("waiting Acquire after Close: err = %v, want ErrClosed", err)
		}
		<-l.Done()
		if !errors.Is(l.Err(), core.ErrLost) || !errors.Is(l.Err(), core.ErrClosed) {
			t.Errorf("lease on a closed store: Err = %v, want ErrLost and ErrClosed", l.Err())
		}
	})
}

func TestConcurrentMutexExcludes(t *testing.T) {
	store := memory.New()
	m := mustMutex(t, store, primitives.WithRetryInterval(time.Millisecond))
	occ := conformance.NewOccupancy(1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				l, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				time.Sleep(50 * time.Microsecond) // stay inside a moment, so that a second holder would be seen
				leave()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if occ.Peak() != 1 {
		t.Errorf("%d holders inside at once", occ.Peak())
	}
}
