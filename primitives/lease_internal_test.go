package primitives

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// extendLog is a Store that records the Extend calls that reached it, in order.
type extendLog struct {
	*memory.Store
	mu    sync.Mutex
	calls []sentExtend
}

type sentExtend struct {
	at  time.Time
	ttl time.Duration
}

func (s *extendLog) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	s.mu.Lock()
	s.calls = append(s.calls, sentExtend{at: time.Now(), ttl: req.TTL})
	s.mu.Unlock()
	return s.Store.Extend(ctx, req)
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
				m.sem.cfg.extended = func(req core.ExtendRequest) {
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
