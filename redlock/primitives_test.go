package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// The seed library's RedlockMutex and RedlockSemaphore scenarios: with every node up, the
// primitives behave over Redlock as over one store.
func TestMutexOverRedlockExcludes(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := mustNew(t, ss)
	m, err := primitives.NewMutex(s, "job", primitives.WithRetryInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	occ := conformance.NewOccupancy(1)
	var last atomic.Uint64
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 30 {
				l, err := m.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				if prev := last.Swap(l.Fence()); l.Fence() <= prev {
					t.Errorf("fence %d after %d", l.Fence(), prev)
				}
				time.Sleep(100 * time.Microsecond)
				leave()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if occ.Peak() != 1 {
		t.Errorf("%d holders at once over Redlock", occ.Peak())
	}
}

func TestSemaphoreOverRedlockKeepsLimit(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 5)
	s := mustNew(t, ss)
	sem, err := primitives.NewSemaphore(s, "pool", 3, primitives.WithRetryInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	occ := conformance.NewOccupancy(3)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for r := range 25 {
				n := 1 + (w+r)%2
				l, err := sem.Acquire(context.Background(), n)
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(n)
				time.Sleep(200 * time.Microsecond)
				leave()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if p := occ.Peak(); p > 3 || p < 2 {
		t.Errorf("peak %d permits in use over Redlock(5), limit 3 (and want real overlap)", p)
	}
}

// TestLeaseSurvivesMinorityFailure: a lease is kept, refresh after refresh, with one node of
// three down, and reported lost once a second fails. In a bubble: fake time, so that a loaded
// machine's stalls cannot end a 300 ms lease early.
func TestLeaseSurvivesMinorityFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns, ss := nodes(core.SystemClock{}, 3)
		s := mustNew(t, ss)
		m, _ := primitives.NewMutex(s, "job", primitives.WithTTL(300*time.Millisecond))
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ns[2].set(true, 0) // one node of three fails mid-lease
		time.Sleep(time.Second)
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost with two of three nodes up: %v", err)
		}
		ns[1].set(true, 0) // a second node fails: no majority can be kept
		select {
		case <-l.Done():
			if late := time.Since(l.Deadline()); late > 0 {
				t.Errorf("the loss was reported %v after the lease's deadline", late)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("lease not reported lost after a majority of nodes failed")
		}
		ns[1].set(false, 0)
		ns[2].set(false, 0)
		l.Release(context.Background())
	})
}

// redisHarness runs the suite over Redlock of three real redis-servers through go-redis. Its
// node timeout is generous: the suite checks what is granted, and on a loaded machine a node's
// 50ms default turns into errors the stress test would count as failures.
type redisHarness struct{ addrs []string }

func (h redisHarness) NewStore(t *testing.T) core.Store {
	var ss []core.Store
	for _, a := range h.addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		st, err := goredis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(); c.Close() })
		ss = append(ss, st)
	}
	return mustNew(t, ss, redlock.WithNodeTimeout(2*time.Second))
}

func (redisHarness) Advance(time.Duration) bool { return false }

// startRedisHarness starts three redis-servers, stopped when t ends, and returns the harness
// of Redlocks over them.
func startRedisHarness(t *testing.T) redisHarness {
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartServer(t).Addr)
	}
	return redisHarness{addrs}
}

// TestConformanceRedlockRedisServers runs alone, not beside the other real-server tests: the
// suite expects a release to have freed the key when the next call comes, and Redlock finishes
// a decided release on a late node in the background; with the machine loaded by other tests
// (under -race) a late node still held a released lease and refused the next grant.
func TestConformanceRedlockRedisServers(t *testing.T) {
	t.Parallel() // mostly waits on its own servers and real TTLs
	conformance.Run(t, startRedisHarness(t), conformance.WithoutNotifier(), conformance.WithLateReleases(), sharedFences, conformance.WithSoak(testenv.Soak()))
}

// TestWaiterOverRedisNodesIsHandedTheLock: a Redlock waiter over Redis nodes, refused, gets the
// lock promptly when the holder releases (at its retry interval), not at the holder's expiry.
func TestWaiterOverRedisNodesIsHandedTheLock(t *testing.T) {
	var ss []core.Store
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: redistest.StartServer(t).Addr})
		st, err := goredis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(); c.Close() })
		ss = append(ss, st)
	}
	rl := &refusals{Store: mustNew(t, ss)}
	ctx := context.Background()
	m, _ := primitives.NewMutex(rl, "handed", primitives.WithTTL(30*time.Second), primitives.WithAcquireTimeout(10*time.Second))
	l, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l2, err := m.Acquire(ctx)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		l2.Release(ctx)
	}()
	// Refused twice: the waiter is waiting between its tries.
	poll.Until(t, "the waiter refused twice", func() bool { return rl.n.Load() >= 2 })
	released := time.Now()
	l.Release(ctx)
	if at := <-got; at.IsZero() || at.Sub(released) > 2*time.Second {
		t.Fatalf("the waiter got the lock %v after the release, want promptly", at.Sub(released))
	}
}

// refusals is a Store that counts the refusals it passes on.
type refusals struct {
	core.Store
	n atomic.Int64
}

func (r *refusals) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := r.Store.Acquire(ctx, req)
	if err == nil && !res.Granted {
		r.n.Add(1)
	}
	return res, err
}
