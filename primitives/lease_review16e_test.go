package primitives

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// overlapStore is a memory Store that counts the Extend calls in flight at once, holds each
// for a while, and fails them with lost once told to.
type overlapStore struct {
	*memory.Store
	in, most atomic.Int32
	lost     atomic.Bool
}

func (s *overlapStore) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	n := s.in.Add(1)
	defer s.in.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(time.Millisecond) // a round trip, on synctest's clock
	if s.lost.Load() {
		return core.ExtendResult{}, core.ErrLost
	}
	return s.Store.Extend(ctx, req)
}

// doneFired reports whether done is closed.
func doneFired(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// TestDoneFiresHoweverTheLeaseEnds: Done taken before the lease ends fires when it ends, and
// Done taken after fires at once, whether the lease was released, lost at a refresh, lost at its
// deadline or found gone by Held; Done taken from many goroutines while the refresher ends the
// lease fires for every one of them.
func TestDoneFiresHoweverTheLeaseEnds(t *testing.T) {
	ends := map[string]func(t *testing.T, s *overlapStore, l core.Lease){
		"release": func(t *testing.T, s *overlapStore, l core.Lease) {
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		},
		"lost at a refresh": func(t *testing.T, s *overlapStore, l core.Lease) {
			s.lost.Store(true)
			time.Sleep(time.Hour)
		},
		"deadline": func(t *testing.T, s *overlapStore, l core.Lease) {
			l.StopRefresh()
			time.Sleep(time.Hour)
		},
		"held finds it gone": func(t *testing.T, s *overlapStore, l core.Lease) {
			s.Store.Release(context.Background(), core.ReleaseRequest{Key: l.Key(), Holder: l.Holder(), Fence: l.Fence()})
			if held, err := l.Held(context.Background()); held || err != nil {
				t.Fatalf("Held: %v, %v", held, err)
			}
		},
		"store closed": func(t *testing.T, s *overlapStore, l core.Lease) {
			s.Store.Close()
			time.Sleep(time.Hour)
		},
	}
	for name, end := range ends {
		for _, early := range []bool{true, false} {
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := &overlapStore{Store: memory.New()}
					defer s.Store.Close()
					m, err := NewMutex(s, "k", WithTTL(time.Minute))
					if err != nil {
						t.Fatal(err)
					}
					l, err := m.Acquire(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					var dones []<-chan struct{}
					if early {
						dones = append(dones, l.Done())
						if l.Done() != dones[0] {
							t.Fatal("two Done calls on a live lease returned two channels")
						}
					}
					// Goroutines taking Done while the lease ends.
					var wg sync.WaitGroup
					fired := make(chan struct{}, 16)
					for range 16 {
						wg.Go(func() {
							<-l.Done()
							fired <- struct{}{}
						})
					}
					end(t, s, l)
					for _, d := range append(dones, l.Done()) {
						if !doneFired(d) {
							t.Fatalf("Done did not fire once the lease ended (Err %v)", l.Err())
						}
					}
					wg.Wait()
					if len(fired) != 16 {
						t.Fatalf("%d of 16 Done waits fired", len(fired))
					}
					l.Release(context.Background())
					if !doneFired(l.Done()) {
						t.Fatal("Done after Release has not fired")
					}
				})
			})
		}
	}
}

// TestFirstExtendsAndRefreshNeverOverlap: Lease.Extend calls from many goroutines, the lease's
// first, racing its first refresh (which make the lease's semaphore between them), reach the
// store one at a time.
func TestFirstExtendsAndRefreshNeverOverlap(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			s := &overlapStore{Store: memory.New()}
			defer s.Store.Close()
			m, err := NewMutex(s, "k", WithTTL(time.Minute), WithRefreshInterval(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					<-start
					if _, err := l.Extend(context.Background(), time.Minute); err != nil {
						t.Error(err)
					}
				})
			}
			time.Sleep(time.Second - time.Nanosecond)
			close(start) // with the refresh, due now
			time.Sleep(time.Nanosecond)
			wg.Wait()
			time.Sleep(5 * time.Second) // more refreshes
			if n := s.most.Load(); n != 1 {
				t.Fatalf("%d Extend calls reached the store at once", n)
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDoneOfALeaseEndedBeforeAnyDoneIsClosed: a lease that ended before anyone asked for Done
// (released, or lost) returns a closed channel, from every call, and Err says why.
func TestDoneOfALeaseEndedBeforeAnyDoneIsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &overlapStore{Store: memory.New()}
		defer s.Store.Close()
		m, _ := NewMutex(s, "k", WithTTL(time.Minute))
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.lost.Store(true)
		time.Sleep(time.Hour)
		if err := l.Err(); !errors.Is(err, core.ErrLost) {
			t.Fatalf("Err after a lost refresh: %v", err)
		}
		for range 3 {
			if !doneFired(l.Done()) {
				t.Fatal("Done of a lost lease is not closed")
			}
		}
	})
}
