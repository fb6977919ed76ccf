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

// extendLog is a Store that records the Extend calls that reached it, in order, and calls
// returned (when set) with each request once the store has answered it, before its caller sees
// the answer.
type extendLog struct {
	*memory.Store
	mu       sync.Mutex
	calls    []sentExtend
	returned func(core.ExtendRequest)
}

type sentExtend struct {
	at  time.Time
	ttl time.Duration
}

func (s *extendLog) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	s.mu.Lock()
	s.calls = append(s.calls, sentExtend{at: time.Now(), ttl: req.TTL})
	s.mu.Unlock()
	res, err := s.Store.Extend(ctx, req)
	if s.returned != nil {
		s.returned(req)
	}
	return res, err
}

func (s *extendLog) last() sentExtend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[len(s.calls)-1]
}

// TestExtendRacingRefreshKeepsTheLastDeadline: Lease.Extend and the background refresh reach
// the store one at a time, and the lease's deadline must be that of whichever reached it last,
// whatever order their replies are applied in. The first call to reach the store is held back
// after its reply, before it applies it, while the other call runs; without the deadline
// being set while the store call is still exclusive, the first call then overwrites the later
// one's deadline (in the first case with one longer than the store's expiry).
func TestExtendRacingRefreshKeepsTheLastDeadline(t *testing.T) {
	const ttl = time.Hour // refreshed every 20 minutes
	for _, tc := range []struct {
		name        string
		extend      time.Duration // the Lease.Extend racing the refresh
		extendFirst bool          // the Extend reaches the store first and is held back
	}{
		{"extend then refresh", 2 * time.Hour, true},
		{"refresh then extend", 10 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &extendLog{Store: memory.New()}
				m, err := NewMutex(store, "k", WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				paused, resume := make(chan struct{}), make(chan struct{})
				var held atomic.Bool
				store.returned = func(req core.ExtendRequest) {
					if (req.TTL == tc.extend) == tc.extendFirst && held.CompareAndSwap(false, true) {
						paused <- struct{}{}
						<-resume
					}
				}
				l, err := m.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				extended := make(chan error, 1)
				extend := func() {
					go func() {
						_, err := l.Extend(context.Background(), tc.extend)
						extended <- err
					}()
				}
				if tc.extendFirst {
					extend()
					<-paused
					time.Sleep(21 * time.Minute) // the refresh is due at 20
				} else {
					time.Sleep(21 * time.Minute) // the refresh runs at 20 and is held back
					<-paused
					extend()
				}
				synctest.Wait() // the other call has reached the store, or waits to
				close(resume)
				if err := <-extended; err != nil {
					t.Fatalf("Extend: %v", err)
				}
				synctest.Wait()

				last := store.last()
				if want := last.at.Add(last.ttl - drift(last.ttl)); !l.Deadline().Equal(want) {
					t.Errorf("Deadline %v, want %v: from the last Extend to reach the store (ttl %v)", l.Deadline(), want, last.ttl)
				}
				snap, err := store.Inspect(context.Background(), "k")
				if err != nil || len(snap.Leases) != 1 {
					t.Fatalf("Inspect: %+v, %v", snap, err)
				}
				if left := time.Until(l.Deadline()); left > snap.Leases[0].TTL {
					t.Errorf("the lease's deadline is %v away, the store's expiry %v: the local deadline outlives the store's", left, snap.Leases[0].TTL)
				}
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

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
