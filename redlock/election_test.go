package redlock_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// Election over Redlock: of memory nodes (which can fail, see node) and of real redis-servers.
// Redlock keeps no line: campaigners retry at their retry interval. The scenarios are those of
// conformance/scenario, as on every store.

// elections returns n elections on key over n Redlock Stores of the same nodes.
func elections(t *testing.T, ss []core.Store, n int, opts ...primitives.Option) []*primitives.Election {
	var els []*primitives.Election
	for _, s := range redlocks(t, ss, n) {
		els = append(els, scenario.MustElection(t, s, "lead", opts...))
	}
	return els
}

func TestElectionOverRedlockOneLeaderAtATime(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	scenario.OneLeaderAtATime(t, elections(t, ss, 4, primitives.WithRetryInterval(time.Millisecond)), 15)
}

func TestElectionOverRedlockRedisServersOneLeaderAtATime(t *testing.T) {
	t.Parallel() // servers of its own: runs beside the other real-server tests
	h := startRedisHarness(t)
	var els []*primitives.Election
	for range 3 {
		els = append(els, scenario.MustElection(t, h.NewStore(t), "lead", primitives.WithRetryInterval(time.Millisecond)))
	}
	scenario.OneLeaderAtATime(t, els, 10)
}

func TestElectionOverRedlockObserveSeesEveryChange(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	els := elections(t, ss, 2)
	obs := elections(t, ss, 1, primitives.WithRetryInterval(time.Hour))[0]
	scenario.ObserveSeesEveryChange(t, els, obs)
}

// In a bubble: fake time, so that a loaded machine's stall cannot end the 200 ms lease before
// the observer has seen its leader.
func TestElectionOverRedlockObserveSeesDeadLeaderGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ss := nodes(core.SystemClock{}, 3)
		el := elections(t, ss, 1, primitives.WithTTL(200*time.Millisecond), primitives.WithoutRefresh())[0]
		obs := elections(t, ss, 1, primitives.WithRetryInterval(time.Hour))[0]
		scenario.ObserveSeesDeadLeaderGone(t, el, obs)
	})
}

func TestElectionOverRedlockObserveEndsWithCtx(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	scenario.ObserveEndsWithCtx(t, elections(t, ss, 1)[0])
}

func TestElectionOverRedlockLeaderCarriesTheValue(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	els := elections(t, ss, 2)
	scenario.LeaderCarriesTheValue(t, els[0], els[1])
}

// TestElectionOverRedlockObserveWithANodeDown: with one node of three down its watch fails, so
// Observe's watch is unreliable and it reads at its interval as well: it still sees a leader
// come and go.
func TestElectionOverRedlockObserveWithANodeDown(t *testing.T) {
	ns, ss := nodes(core.SystemClock{}, 3)
	ns[2].set(true, 0)
	els := elections(t, ss, 2)
	scenario.ObserveSeesEveryChange(t, els[:1], els[1])
}
