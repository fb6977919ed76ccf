package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
)

// TestMain runs the package's tests, up to 4 parallel ones at once, stops the shared server
// after them and checks that no goroutine outlives them: every Store's listener, renewer and
// leaves end with its Close.
func TestMain(m *testing.M) {
	// Most parallel tests wait (a fault's length, a TTL, a self-check's timeout) beside the
	// conformance runs, which keep the CPUs busy: unless -parallel says otherwise, more of them
	// run at once than the machine has CPUs, go test's default.
	testenv.ParallelWaiters(4)
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

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
	s, err := postgres.New(context.Background(), pool, opts...)
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
// own (uniqueKey). The tests that stop or pause a server start servers of their own.
//
// A test that waits (a TTL, a timeout, a fault's length) or repeats much runs in parallel
// (t.Parallel) when it shares nothing but the server with the others. Tests that run serially,
// before every parallel one starts: those that make rows dead by hand and sweep them (another
// test's sweep would take them first), end every listening session (TestListenerReconnects),
// count the server's lock waits, check for leaked goroutines of their own, or bound how late
// calls return under a fault (faults_test.go).
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
}, req core.AcquireRequest) core.Wake {
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
