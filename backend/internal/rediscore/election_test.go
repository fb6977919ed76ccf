package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/primitives"
)

// Election on a real redis-server through both drivers (see eachDriver), each Election with a
// Store of its own, as separate processes have: the scenarios of conformance/scenario, and a
// leader whose Store closes. Those that follow Observe with a retry interval of an hour (so
// that only a Watch notification explains a prompt update) need the Redis core's Watch;
// elections under faults are in electfaults_test.go.

func TestElectionOnRedisOneLeaderAtATime(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		var els []*primitives.Election
		for range 4 {
			els = append(els, scenario.MustElection(t, mk(), "lead", primitives.WithRetryInterval(time.Millisecond)))
		}
		scenario.OneLeaderAtATime(t, els, 15)
	})
}

func TestElectionOnRedisResignHandsOverAtOnce(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		a := scenario.MustElection(t, mk(), "lead", primitives.WithTTL(time.Minute))
		b := scenario.MustElection(t, mk(), "lead", primitives.WithTTL(time.Minute), primitives.WithRetryInterval(time.Hour))
		scenario.ResignHandsOver(t, a, b, func() bool { return lineLen(t, addr, "lead") == 1 })
	})
}

func TestElectionOnRedisObserveSeesEveryChange(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		els := []*primitives.Election{scenario.MustElection(t, mk(), "lead"), scenario.MustElection(t, mk(), "lead")}
		obs := scenario.MustElection(t, mk(), "lead", primitives.WithRetryInterval(time.Hour))
		t.Run("resignations", func(t *testing.T) { scenario.ObserveSeesEveryChange(t, els, obs) })
		t.Run("handovers", func(t *testing.T) {
			scenario.ObserveSeesHandovers(t, els, obs, func() int { return lineLen(t, addr, "lead") })
		})
	})
}

func TestElectionOnRedisObserveSeesDeadLeaderGone(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		t.Run("not refreshed", func(t *testing.T) {
			el := scenario.MustElection(t, mk(), "lead", primitives.WithTTL(300*time.Millisecond), primitives.WithoutRefresh())
			obs := scenario.MustElection(t, mk(), "lead", primitives.WithRetryInterval(time.Hour))
			scenario.ObserveSeesDeadLeaderGone(t, el, obs)
		})
		t.Run("store closed", func(t *testing.T) {
			ls := mk()
			el := scenario.MustElection(t, ls, "closed", primitives.WithTTL(300*time.Millisecond))
			obs := scenario.MustElection(t, mk(), "closed", primitives.WithRetryInterval(time.Hour))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l, err := el.Campaign(ctx, "mortal")
			if err != nil {
				t.Fatal(err)
			}
			o := scenario.NewObserver(t, obs.Observe(ctx))
			o.Expect(scenario.LeaderOf(l))
			ls.Close() // the leader's process goes: its lease stays on the server until its TTL
			o.Expect(primitives.Leader{})
			if now := time.Now(); now.Before(l.Deadline()) {
				t.Errorf("the leader was seen gone %v before its lease's deadline", l.Deadline().Sub(now))
			}
			l.Release(ctx)
		})
	})
}

func TestElectionOnRedisObserveEndsWithCtx(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		noLeaks(t)
		scenario.ObserveEndsWithCtx(t, scenario.MustElection(t, mk(), "lead"))
	})
}

func TestElectionOnRedisLeaderCarriesTheValue(t *testing.T) {
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		scenario.LeaderCarriesTheValue(t, scenario.MustElection(t, mk(), "lead"), scenario.MustElection(t, mk(), "lead"))
	})
}
