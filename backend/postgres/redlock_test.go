package postgres_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// The Store is a core.FenceRaiser, so it can be a Redlock node like the memory and Redis stores:
// Redlocks over three PostgreSQL servers, each primitive with Stores of its own, elect one leader
// at a time and keep a read-write lock's exclusion.

// overThreeServers returns a maker of Redlocks over three PostgreSQL servers of the test's own.
func overThreeServers(t *testing.T) func() core.Store {
	var urls []string
	for range 3 {
		urls = append(urls, pgtest.StartServer(t).URL)
	}
	return func() core.Store {
		var nodes []core.Store
		for _, u := range urls {
			nodes = append(nodes, newStore(t, u))
		}
		rl, err := redlock.New(nodes, redlock.WithNodeTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return rl
	}
}

func TestRedlockOverPostgres(t *testing.T) {
	mk := overThreeServers(t)
	key := uniqueKey(t)
	t.Run("OneLeaderAtATime", func(t *testing.T) {
		var els []*primitives.Election
		for range 3 {
			els = append(els, scenario.MustElection(t, mk(), key+"lead", primitives.WithRetryInterval(time.Millisecond)))
		}
		scenario.OneLeaderAtATime(t, els, 10)
	})
	t.Run("RWExcludesAndShares", func(t *testing.T) {
		var rws []*primitives.RWMutex
		for range 3 {
			rws = append(rws, scenario.MustRWMutex(t, mk(), key+"rw", primitives.WithRetryInterval(time.Millisecond),
				primitives.WithAcquireTimeout(time.Minute)))
		}
		if peak := scenario.RWStress(t, rws, 6, 10, time.Millisecond); peak < 2 {
			t.Errorf("at most %d reader at once: readers did not share the key", peak)
		}
	})
}
