package primitives_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The Election's behaviours on the memory store: the scenarios of conformance/scenario, which
// Redlock (redlock/election_test.go) and both Redis drivers
// (backend/internal/rediscore/election_test.go) run too.

func TestElectionOneLeaderAtATime(t *testing.T) {
	s := memory.New()
	var els []*primitives.Election
	for range 4 {
		els = append(els, scenario.MustElection(t, s, "lead", primitives.WithRetryInterval(time.Millisecond)))
	}
	scenario.OneLeaderAtATime(t, els, 25)
}

func TestElectionResignHandsOverAtOnce(t *testing.T) {
	s := memory.New()
	a := scenario.MustElection(t, s, "lead", primitives.WithTTL(time.Minute))
	b := scenario.MustElection(t, s, "lead", primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Hour))
	scenario.ResignHandsOver(t, a, b, func() bool { return scenario.LineLength(s, "lead")() == 1 })
}

func TestElectionObserveSeesEveryChange(t *testing.T) {
	s := memory.New()
	els := []*primitives.Election{scenario.MustElection(t, s, "lead"), scenario.MustElection(t, s, "lead")}
	obs := scenario.MustElection(t, s, "lead", primitives.WithRetryInterval(time.Hour))
	t.Run("resignations", func(t *testing.T) { scenario.ObserveSeesEveryChange(t, els, obs) })
	t.Run("handovers", func(t *testing.T) { scenario.ObserveSeesHandovers(t, els, obs, scenario.LineLength(s, "lead")) })
}

// In a bubble: fake time, so that a loaded machine's stall cannot end the 200 ms lease before
// the observer has seen its leader.
func TestElectionObserveSeesDeadLeaderGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New()
		el := scenario.MustElection(t, s, "lead", primitives.WithTTL(200*time.Millisecond), primitives.WithoutRefresh())
		obs := scenario.MustElection(t, s, "lead", primitives.WithRetryInterval(time.Hour))
		scenario.ObserveSeesDeadLeaderGone(t, el, obs)
	})
}

func TestElectionObserveEndsWithCtx(t *testing.T) {
	scenario.ObserveEndsWithCtx(t, scenario.MustElection(t, memory.New(), "lead"))
}

func TestElectionLeaderCarriesTheValue(t *testing.T) {
	s := memory.New()
	scenario.LeaderCarriesTheValue(t, scenario.MustElection(t, s, "lead"), scenario.MustElection(t, s, "lead"))
}

// inspectCounter is a Store that counts Inspects, and is no core.Watcher: an Election on it
// polls.
type inspectCounter struct {
	core.Store
	n atomic.Int64
}

func (s *inspectCounter) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	s.n.Add(1)
	return s.Store.Inspect(ctx, key)
}

// TestElectionObservePollsAtTheLongestRetryInterval: Observe on a store that cannot announce
// changes reads it every ten retry intervals; with the longest retry interval allowed
// (core.MaxDuration) that is never, within the test, after the first read — not a read loop.
// The test looks for 200ms: a loop reads thousands of times in that, a correct Observe once.
func TestElectionObservePollsAtTheLongestRetryInterval(t *testing.T) {
	s := &inspectCounter{Store: memory.New()}
	el := scenario.MustElection(t, s, "lead", primitives.WithRetryInterval(core.MaxDuration))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := scenario.NewObserver(t, el.Observe(ctx))
	o.Expect(primitives.Leader{})
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end) && s.n.Load() < 100; time.Sleep(time.Millisecond) {
	}
	if n := s.n.Load(); n > 2 {
		t.Errorf("Observe read the store %d times within 200ms with a retry interval of %v", n, core.MaxDuration)
	}
}

// observeCounter counts Inspects; its Watch (when watch is set) forwards to the memory store,
// reporting itself reliable or not as reliable says.
type observeCounter struct {
	core.Store
	mem      *memory.Store
	inspects atomic.Int64
}

func (c *observeCounter) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	c.inspects.Add(1)
	return c.Store.Inspect(ctx, key)
}

type observeWatching struct {
	*observeCounter
	reliable bool
}

func (c *observeWatching) Watch(ctx context.Context, key string) (core.Wake, error) {
	w, err := c.mem.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	return observeReliability{w, c.reliable}, nil
}

type observeReliability struct {
	core.Wake
	reliable bool
}

func (r observeReliability) Reliable() bool { return r.reliable }

// Observe reads the store as its doc says, in a bubble's fake time: with a reliable watch, not
// at all while there is no leader and no change, and about once per leader's TTL while one
// leads; with an unreliable watch or none, every ten retry intervals; never in a loop. A leader
// that dies is reported gone within its TTL, and a new one at once.
func TestObserveReadsAsDocumented(t *testing.T) {
	for _, tc := range []struct {
		name             string
		watch, reliable  bool
		idleMin, idleMax int64 // reads in 10s with no leader
		leadMin, leadMax int64 // reads in 60s with a leader of TTL 10s
	}{
		{"reliable watch", true, true, 0, 0, 5, 25},
		{"unreliable watch", true, false, 90, 110, 590, 640},
		{"no watch", false, false, 90, 110, 590, 640},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				ic := &observeCounter{Store: mem, mem: mem}
				var store core.Store = ic
				if tc.watch {
					store = &observeWatching{observeCounter: ic, reliable: tc.reliable}
				}
				obs, err := primitives.NewElection(store, "el", primitives.WithRetryInterval(10*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				seen := obs.Observe(ctx)
				if ld := <-seen; ld != (primitives.Leader{}) {
					t.Fatalf("first: %+v", ld)
				}
				synctest.Wait()
				base := ic.inspects.Load()
				time.Sleep(10 * time.Second)
				synctest.Wait()
				if n := ic.inspects.Load() - base; n < tc.idleMin || n > tc.idleMax {
					t.Errorf("%d reads in 10s without a leader; want %d..%d", n, tc.idleMin, tc.idleMax)
				}
				el, err := primitives.NewElection(mem, "el", primitives.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				l, err := el.Campaign(ctx, "a")
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				if ld := <-seen; ld.Value != "a" || ld.Fence != l.Fence() {
					t.Fatalf("leader %+v", ld)
				}
				if d := time.Since(start); tc.reliable && d > 0 {
					t.Errorf("a new leader reported after %v; want at once", d)
				}
				synctest.Wait()
				base = ic.inspects.Load()
				time.Sleep(60 * time.Second)
				synctest.Wait()
				if n := ic.inspects.Load() - base; n < tc.leadMin || n > tc.leadMax {
					t.Errorf("%d reads in 60s with a leader; want %d..%d", n, tc.leadMin, tc.leadMax)
				}
				// The leader dies: its lease is no longer refreshed, and ends by its TTL.
				l.StopRefresh()
				died := time.Now()
				select {
				case ld := <-seen:
					if ld != (primitives.Leader{}) {
						t.Fatalf("after the leader died: %+v", ld)
					}
				case <-time.After(11 * time.Second):
					t.Fatal("a dead leader not reported gone within its TTL")
				}
				if d := time.Since(died); d > 10*time.Second+200*time.Millisecond {
					t.Errorf("a dead leader reported gone after %v", d)
				}
				cancel()
				for range seen {
				}
			})
		})
	}
}
