package primitives_test

import (
	"context"
	"sync/atomic"
	"testing"
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

func TestElectionObserveSeesDeadLeaderGone(t *testing.T) {
	s := memory.New()
	el := scenario.MustElection(t, s, "lead", primitives.WithTTL(200*time.Millisecond), primitives.WithoutRefresh())
	obs := scenario.MustElection(t, s, "lead", primitives.WithRetryInterval(time.Hour))
	scenario.ObserveSeesDeadLeaderGone(t, el, obs)
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
