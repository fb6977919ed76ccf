package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness runs the suite over Redlock of n memory stores sharing a manual clock. Redlock times
// its rounds by the real clock: its default node timeout, a tenth of the TTL (10 ms for the
// state machine's shortest), cut off a node that a loaded machine left unscheduled that long,
// and a re-acquire by the same holder then came back at another fence (TestConformanceRedlock5
// failed so under -race beside other suites). The suite checks what is granted: the nodes get
// a generous timeout, as redisHarness's do.
type harness struct {
	clock *core.ManualClock
	store *redlock.Store
}

func newHarness(t testing.TB, n int) *harness {
	c := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, ss := nodes(c, n)
	return &harness{clock: c, store: mustNew(t, ss, redlock.WithNodeTimeout(2*time.Second))}
}

func (h *harness) NewStore(*testing.T) core.Store { return h.store }
func (h *harness) Advance(d time.Duration) bool {
	h.clock.Advance(d)
	return true
}

func TestConformanceRedlock3(t *testing.T) {
	conformance.Run(t, newHarness(t, 3), conformance.WithoutNotifier(), conformance.WithLateReleases(), sharedFences, conformance.WithSoak(testenv.Soak()))
}
func TestConformanceRedlock5(t *testing.T) {
	conformance.Run(t, newHarness(t, 5), conformance.WithoutNotifier(), conformance.WithLateReleases(), sharedFences, conformance.WithSoak(testenv.Soak()))
}

func TestNewRefusesBadInput(t *testing.T) {
	a, b := memory.New(), memory.New()
	var nilStore *memory.Store
	tests := []struct {
		name   string
		stores []core.Store
		opts   []redlock.Option
		want   string
	}{
		{"none", nil, nil, "stores"},
		{"nil store", []core.Store{a, nil, b}, nil, "redlock: new: invalid argument: stores[1]: must not be nil"},
		{"typed nil store", []core.Store{a, nilStore, b}, nil, "redlock: new: invalid argument: stores[1]: must not be nil"},
		{"same store twice", []core.Store{a, b, a}, nil, "stores[0] and stores[2]"},
		{"node timeout", []core.Store{a}, []redlock.Option{redlock.WithNodeTimeout(0)}, "node timeout"},
		{"drift", []core.Store{a}, []redlock.Option{redlock.WithDrift(1.5, 0)}, "drift"},
		{"no fence floor", []core.Store{a, struct{ core.Store }{b}}, nil, "stores[1]: struct { core.Store } does not implement core.FenceRaiser"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := redlock.New(tc.stores, tc.opts...)
			if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	if s, err := redlock.New([]core.Store{a, b}); err != nil || s.Quorum(1) != 2 {
		t.Errorf("even N: %v; want allowed with quorum 2", err)
	}
	c, d, e := memory.New(), memory.New(), memory.New()
	s := mustNew(t, []core.Store{a, b, c, d, e})
	for limit, want := range map[int]int{1: 3, 2: 4, 3: 4, 4: 5, 100: 5} {
		if got := s.Quorum(limit); got != want {
			t.Errorf("Quorum(%d) over 5 nodes = %d, want %d", limit, got, want)
		}
	}
}

func TestEveryNodeDownMask(t *testing.T) {
	for _, n := range []int{3, 5} {
		for mask := range 1 << n {
			t.Run(fmt.Sprintf("N=%d/down=%0*b", n, n, mask), func(t *testing.T) {
				clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
				ns, ss := nodes(clock, n)
				up := 0
				for i, nd := range ns {
					down := mask&(1<<i) != 0
					nd.set(down, 0)
					if !down {
						up++
					}
				}
				s := mustNew(t, ss)
				ctx := context.Background()
				res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Second})
				if want := up >= n/2+1; (err == nil && res.Granted) != want {
					t.Fatalf("%d of %d up: granted %v (%v), want %v", up, n, res.Granted, err, want)
				}
				if err == nil && res.Granted {
					return
				}
				for i, nd := range ns {
					if mask&(1<<i) != 0 {
						continue
					}
					if snap, _ := nd.Inspect(ctx, "k"); len(snap.Leases) != 0 {
						t.Errorf("node %d kept %+v after a failed acquire", i, snap.Leases)
					}
				}
			})
		}
	}
}

func TestForeignLeaseOnOneNode(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ns, ss := nodes(clock, 3)
	ctx := context.Background()
	ns[0].Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "stranger", Permits: 1, Limit: 1, TTL: time.Hour})
	s := mustNew(t, ss)
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
	if err != nil || !res.Granted {
		t.Fatalf("with a foreign lease on one node of three: %+v, %v; want granted by the other two", res, err)
	}
	snap, _ := s.Inspect(ctx, "k")
	if len(snap.Leases) != 1 || snap.Leases[0].Holder != "a" {
		t.Errorf("Inspect: %+v, want a's lease alone (the stranger holds a minority)", snap.Leases)
	}
}

func TestSlowNodesRunOutValidity(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ns, ss := nodes(clock, 3)
	ns[1].set(false, 80*time.Millisecond)
	ns[2].set(false, 80*time.Millisecond)
	s := mustNew(t, ss, redlock.WithNodeTimeout(time.Second)) // slower than the TTL, not timed out
	ctx := context.Background()
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: 50 * time.Millisecond})
	if err != nil || res.Granted {
		t.Fatalf("a majority answering after the TTL: %+v, %v; want refused", res, err)
	}
	for i, nd := range ns {
		nd.set(false, 0)
		if snap, _ := nd.Inspect(ctx, "k"); len(snap.Leases) != 0 {
			t.Errorf("node %d kept %+v after a refusal for lack of validity", i, snap.Leases)
		}
	}
}

func TestNodeRestartsEmptyDuringLease(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ns, ss := nodes(clock, 3)
	s := mustNew(t, ss)
	ctx := context.Background()
	res, _ := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute})
	ns[0].wipe()
	clock.Advance(time.Second) // a restart takes a while; the server clock moves on
	if _, err := s.Extend(ctx, core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatalf("Extend with one node of three restarted empty: %v, want kept by the other two", err)
	}
	if r, _ := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute}); r.Granted {
		t.Fatal("a second holder got the lease while a majority still held the first")
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	r2, _ := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "b", Permits: 1, Limit: 1, TTL: time.Minute})
	if !r2.Granted || r2.Fence <= res.Fence {
		t.Errorf("grant after the restart: %+v, want a fence above %d", r2, res.Fence)
	}
}

// TestFenceOrderCarriesThroughTheSharedNode builds the case the raise exists for: node 0
// grants every time while nodes 1 and 2 take turns, so node 0's counter runs ahead; then a
// majority without node 0 grants. Its fence must still be above every earlier one.
func TestFenceOrderCarriesThroughTheSharedNode(t *testing.T) {
	clock := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ns, ss := nodes(clock, 3)
	s := mustNew(t, ss)
	ctx := context.Background()
	var last uint64
	grant := func(holder string, down int) {
		t.Helper()
		for i, nd := range ns {
			nd.set(i == down, 0)
		}
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			t.Fatalf("%s with node %d down: %+v, %v", holder, down, res, err)
		}
		if res.Fence <= last {
			t.Fatalf("%s with node %d down: fence %d is not above the previous %d", holder, down, res.Fence, last)
		}
		last = res.Fence
		if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: holder}); err != nil || !ok {
			t.Fatalf("release %s: %v, %v", holder, ok, err)
		}
	}
	for i := range 6 {
		grant(fmt.Sprint("a", i), 1+i%2) // nodes 1 and 2 take turns being down
	}
	grant("b", 0)
}

// fenceStore is what a Redlock node is: a Store and a FenceRaiser.
type fenceStore interface {
	core.Store
	core.FenceRaiser
}

// counting is a Store that counts acquire calls answered, of every kind.
type counting struct {
	fenceStore
	acquires atomic.Int32
}

func (c *counting) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	defer c.acquires.Add(1)
	return c.fenceStore.Acquire(ctx, req)
}

func (c *counting) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	defer c.acquires.Add(1)
	return c.fenceStore.AcquireAbove(ctx, req, floor)
}

func (c *counting) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	defer c.acquires.Add(1)
	return c.fenceStore.RaiseFence(ctx, req, fence)
}

// TestNodesInStepGrantInOneRound: once the first grant has brought the nodes' counters in step,
// an acquire is one Acquire per node (no round to raise fences), and fences still increase.
func TestNodesInStepGrantInOneRound(t *testing.T) {
	var cs []*counting
	var ss []core.Store
	for range 3 {
		c := &counting{fenceStore: memory.New()}
		cs, ss = append(cs, c), append(ss, c)
	}
	s, err := redlock.New(ss)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last uint64
	for i := range 20 {
		for _, c := range cs {
			c.acquires.Store(0)
		}
		holder := fmt.Sprint("h", i)
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			t.Fatalf("acquire %d: %+v, %v", i, res, err)
		}
		if res.Fence <= last {
			t.Fatalf("acquire %d: fence %d not above %d", i, res.Fence, last)
		}
		last = res.Fence
		for j, c := range cs {
			// Acquire returns on a quorum; the last node's call may still be under way.
			poll.Until(t, fmt.Sprintf("acquire %d: node %d's Acquire call", i, j), func() bool { return c.acquires.Load() > 0 })
			if n := c.acquires.Load(); i > 0 && n != 1 {
				t.Fatalf("acquire %d: node %d saw %d Acquire calls, want 1: nodes in step need no raise", i, j, n)
			}
		}
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: holder}); err != nil {
			t.Fatal(err)
		}
	}
}

// sharedFences marks a known defect: when grants on a key race, a node raised to the quorum's
// fence after its counter passed it gives the raised lease a fence another lease of that node
// has, so two Redlock leases can share a fence. Raising above the counter instead starves
// readers of an RWMutex (each raise collides with the next grant); a fix needs its own design.
var sharedFences = conformance.WithSharedFencesUnderContention("a node raised late to a fence its counter passed")
