package postgres_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// The Store is a core.FenceRaiser, so it can be a Redlock node like the memory and Redis stores:
// Redlocks over three PostgreSQL nodes, each primitive with Stores of its own, elect one leader
// at a time and keep a read-write lock's exclusion.

// overThreeNodes returns a maker of Redlocks over three nodes of the test's own: three table
// prefixes on the package's server, whose Stores share no table and no channel, as three servers'
// would not (no node fails in these tests; the fault tests stop servers of their own).
func overThreeNodes(t *testing.T) func() core.Store {
	url := serverURL(t)
	var b [4]byte
	rand.Read(b[:])
	var prefixes []string
	for i := range 3 {
		prefixes = append(prefixes, fmt.Sprintf("node%d_%s_", i, hex.EncodeToString(b[:])))
	}
	return func() core.Store {
		var nodes []core.Store
		for _, p := range prefixes {
			nodes = append(nodes, newStore(t, url, postgres.WithTablePrefix(p)))
		}
		rl, err := redlock.New(nodes, redlock.WithNodeTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return rl
	}
}

func TestRedlockOverPostgres(t *testing.T) {
	testenv.SkipShort(t, "sets up three nodes' tables and runs two scenarios over them")
	t.Parallel()
	mk := overThreeNodes(t)
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
