package rediscore_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/primitives"
)

// RWMutex and Election on a Redis Cluster of three masters, through both drivers, each
// primitive with a Store of its own: the same scenarios as on one server, with no code of the
// Cluster's own. Observe, with a retry interval of an hour, is woken only by the Watch's
// messages, which travel by the Cluster's pub/sub.
func TestRWMutexAndElectionOnCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	for _, name := range []string{"goredis", "valkey"} {
		mk := func() redisharness.Store { return redisharness.Drivers[name](t, addrs...) }
		t.Run(name+"/RWStress", func(t *testing.T) {
			var rws []*primitives.RWMutex
			for range 3 {
				rws = append(rws, scenario.MustRWMutex(t, mk(), "rw:"+name, primitives.WithRetryInterval(time.Millisecond), primitives.WithAcquireTimeout(time.Minute)))
			}
			if peak := scenario.RWStress(t, rws, 8, 10, time.Millisecond); peak < 2 {
				t.Errorf("at most %d reader at once: readers did not share the key", peak)
			}
		})
		t.Run(name+"/WriterNotStarved", func(t *testing.T) {
			rd := scenario.MustRWMutex(t, mk(), "starve:"+name)
			wr := scenario.MustRWMutex(t, mk(), "starve:"+name, primitives.WithAcquireTimeout(5*time.Second))
			scenario.WriterNotStarved(t, rd, wr, scenario.WriterInLine(rd))
		})
		t.Run(name+"/OneLeaderAtATime", func(t *testing.T) {
			var els []*primitives.Election
			for range 3 {
				els = append(els, scenario.MustElection(t, mk(), "lead:"+name, primitives.WithRetryInterval(time.Millisecond)))
			}
			scenario.OneLeaderAtATime(t, els, 10)
		})
		t.Run(name+"/ObserveSeesEveryChange", func(t *testing.T) {
			els := []*primitives.Election{scenario.MustElection(t, mk(), "obs:"+name), scenario.MustElection(t, mk(), "obs:"+name)}
			obs := scenario.MustElection(t, mk(), "obs:"+name, primitives.WithRetryInterval(time.Hour))
			scenario.ObserveSeesEveryChange(t, els, obs)
		})
	}
}
