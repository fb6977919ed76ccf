package postgres_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
)

// TestConformanceThroughPgBouncer: the suite passes with every operation going through PgBouncer
// in transaction mode (PgBouncer 1.18 keeps no prepared statements, so the pool sends unnamed
// ones: default_query_exec_mode=exec), and the listening connection reaching the server
// directly (WithListenDSN), as the package doc says to set it up.
func TestConformanceThroughPgBouncer(t *testing.T) {
	srv := server(t)
	conformance.Run(t, bouncerHarness{pooled: pgtest.StartPgBouncer(t, srv), direct: srv.URL})
}

type bouncerHarness struct{ pooled, direct string }

func (h bouncerHarness) NewStore(t *testing.T) core.Store {
	return newStore(t, h.pooled, postgres.WithListenDSN(h.direct))
}

func (bouncerHarness) Advance(time.Duration) bool { return false }
