package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
)

// harness connects the conformance suite to one PostgreSQL database: every Store it makes has a
// pool of its own, as separate processes would.
type harness struct{ url string }

func (h harness) NewStore(t *testing.T) core.Store { return newStore(t, h.url) }

func (harness) Advance(time.Duration) bool { return false }

// newStore returns a Store over a new pool to url; both are closed when t ends.
func newStore(t testing.TB, url string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	return storeOn(t, poolConfig(t, url, nil), opts...)
}

// poolConfig returns the configuration of a pool to url, changed by change when it is not nil.
func poolConfig(t testing.TB, url string, change func(*pgxpool.Config)) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(cfg)
	}
	return cfg
}

// storeOn returns a Store over a new pool of cfg; both are closed when t ends.
func storeOn(t testing.TB, cfg *pgxpool.Config, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(pool, opts...)
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		pool.Close()
	})
	return s
}

// shared is the server of the package's tests that leave it running; each test uses keys of its
// own (uniqueKey). The fault tests start servers of their own.
var shared struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

// server returns the package's shared server, started on first use and stopped by TestMain.
// Without PostgreSQL the test is skipped, or fails under CI=true.
func server(t testing.TB) *pgtest.Server {
	t.Helper()
	if url := os.Getenv("LEASEHOLD_POSTGRES_URL"); url != "" {
		return &pgtest.Server{URL: url} // a server of the developer's; the fault tests still start their own
	}
	shared.once.Do(func() { shared.srv, shared.err = pgtest.Launch() })
	if shared.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(shared.err)
		}
		t.Skip(shared.err)
	}
	return shared.srv
}

func serverURL(t testing.TB) string { return server(t).URL }

func TestConformance(t *testing.T) {
	conformance.Run(t, harness{url: serverURL(t)})
}

// newPool returns a pool to url, closed when t ends.
func newPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// waitFor waits up to 10s for cond, failing t with what it waited for.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConformanceInEveryExecMode: the suite passes whichever way pgx sends statements — the
// modes a pool behind PgBouncer in transaction mode needs (unnamed statements, or the simple
// protocol) as well as the default cache of prepared statements.
func TestConformanceInEveryExecMode(t *testing.T) {
	url := serverURL(t)
	for name, mode := range map[string]pgx.QueryExecMode{"exec": pgx.QueryExecModeExec, "simple": pgx.QueryExecModeSimpleProtocol,
		"describe": pgx.QueryExecModeCacheDescribe} {
		t.Run(name, func(t *testing.T) {
			conformance.Run(t, modeHarness{url: url, mode: mode})
		})
	}
}

type modeHarness struct {
	url  string
	mode pgx.QueryExecMode
}

func (h modeHarness) NewStore(t *testing.T) core.Store {
	return storeOn(t, poolConfig(t, h.url, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = h.mode }))
}

func (modeHarness) Advance(time.Duration) bool { return false }

// uniqueKey returns a key for t alone: its name and a random suffix, so that runs of the test
// against one server (-count) do not meet each other's leases and lines.
func uniqueKey(t testing.TB) string {
	var b [4]byte
	rand.Read(b[:])
	return t.Name() + "-" + hex.EncodeToString(b[:])
}

// enroll makes req's try, which must be refused, and registers its waiter, closed when t ends.
func enroll(t testing.TB, s interface {
	core.Store
	core.Notifier
}, req core.AcquireRequest) core.Waiter {
	t.Helper()
	ctx := context.Background()
	if res, err := s.Acquire(ctx, req); err != nil || res.Granted {
		t.Fatalf("the try of %q: %+v, %v; want refused", req.Holder, res, err)
	}
	w, err := s.Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}
