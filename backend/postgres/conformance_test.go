package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// harness connects the conformance suite to one PostgreSQL database: every Store it makes has a
// pool of its own, as separate processes would.
type harness struct{ url string }

func (h harness) NewStore(t *testing.T) core.Store {
	skipRepeats(t, true)
	return newStore(t, h.url)
}

func (harness) Advance(time.Duration) bool { return false }

// repeats are the conformance subtests that send the statements the others send, many times
// over: random histories, and a stress of eight workers.
var repeats = []string{"/StateMachine", "/ConcurrentHoldersNeverExceedLimit"}

// cutShort is the conformance subtest that cuts calls short, for a second (a load of cancelled
// calls, each of which ends its session): how pgx gives up a statement is the same whichever way
// it sends it, so the exec modes run it only with LEASEHOLD_SOAK=1; through PgBouncer, which
// stands between the canceled session and the server, it runs whenever the suite does.
const cutShort = "/CallsCutShortNeitherShareNorStrandAKey"

// skipRepeats skips the subtest t, the first time it makes a Store, when it is one of repeats
// and they do not run here: under -short, and, unless LEASEHOLD_SOAK=1, where main is false
// (the exec modes, PgBouncer), through which the suite's other subtests send every kind of
// statement already.
func skipRepeats(t *testing.T, main bool) {
	if !testing.Short() && (main || testenv.Soak()) {
		return
	}
	for _, r := range repeats {
		if strings.HasSuffix(t.Name(), r) {
			t.Skip("repeats what the other subtests send: TestConformance runs it, without -short; here with LEASEHOLD_SOAK=1")
		}
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, harness{url: serverURL(t)}, conformance.WithSoak(testenv.Soak()))
}

// TestConformanceInEveryExecMode: the suite passes whichever way pgx sends statements — the
// modes a pool behind PgBouncer in transaction mode needs (unnamed statements, or the simple
// protocol) as well as the default cache of prepared statements. Without LEASEHOLD_SOAK=1 only
// the simple protocol, whose parameters go as text, runs here: TestConformanceThroughPgBouncer
// sends the suite's statements unnamed (exec mode), and the cached descriptions (describe) send
// the default mode's statements and parameters unnamed.
func TestConformanceInEveryExecMode(t *testing.T) {
	testenv.SkipShort(t, "the suite three more times")
	t.Parallel()
	url := serverURL(t)
	for name, mode := range map[string]pgx.QueryExecMode{"exec": pgx.QueryExecModeExec, "simple": pgx.QueryExecModeSimpleProtocol,
		"describe": pgx.QueryExecModeCacheDescribe} {
		t.Run(name, func(t *testing.T) {
			switch {
			case testenv.Soak():
			case mode == pgx.QueryExecModeExec:
				t.Skip("TestConformanceThroughPgBouncer runs the suite in exec mode (PgBouncer's URL asks for it), through the pooler: here with LEASEHOLD_SOAK=1")
			case mode == pgx.QueryExecModeCacheDescribe:
				t.Skip("sends TestConformance's statements, with the same binary parameters, unnamed as exec mode does: here with LEASEHOLD_SOAK=1")
			}
			t.Parallel()
			conformance.Run(t, modeHarness{url: url, mode: mode}, conformance.WithSoak(testenv.Soak()))
		})
	}
}

type modeHarness struct {
	url  string
	mode pgx.QueryExecMode
}

func (h modeHarness) NewStore(t *testing.T) core.Store {
	skipRepeats(t, false)
	if !testenv.Soak() && strings.HasSuffix(t.Name(), cutShort) {
		t.Skip("cuts calls short as TestConformance does, in the same way in every exec mode: here with LEASEHOLD_SOAK=1")
	}
	return storeOn(t, poolConfig(t, h.url, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = h.mode }))
}

func (modeHarness) Advance(time.Duration) bool { return false }

// TestConformanceThroughPgBouncer: the suite passes with every operation going through PgBouncer
// in transaction mode (PgBouncer 1.18 keeps no prepared statements, so the pool sends unnamed
// ones: default_query_exec_mode=exec), and the listening connection reaching the server
// directly (WithListenDSN), as the package doc says to set it up.
func TestConformanceThroughPgBouncer(t *testing.T) {
	testenv.SkipShort(t, "the suite once more")
	t.Parallel()
	srv := server(t)
	conformance.Run(t, bouncerHarness{pooled: pgtest.StartPgBouncer(t, srv), direct: srv.URL}, conformance.WithSoak(testenv.Soak()))
}

type bouncerHarness struct{ pooled, direct string }

func (h bouncerHarness) NewStore(t *testing.T) core.Store {
	skipRepeats(t, false)
	return newStore(t, h.pooled, postgres.WithListenDSN(h.direct))
}

func (bouncerHarness) Advance(time.Duration) bool { return false }
