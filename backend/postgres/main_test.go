package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	neturl "net/url"
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

// storeOn returns a Store over a new pool of cfg; both are closed when t ends. A configuration
// whose sessions' search_path is a schema (ownSchema's URLs) makes a Store in that schema.
func storeOn(t testing.TB, cfg *pgxpool.Config, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	if schema := cfg.ConnConfig.RuntimeParams["search_path"]; schema != "" {
		opts = append([]postgres.Option{postgres.WithSchema(schema)}, opts...)
	}
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
// Tests run in parallel (t.Parallel) when they share nothing but the server with the others.
// Those that sweep by hand or make rows dead by hand keep their tables in a schema of their own
// (ownSchema): another test's sweep would take their rows first, or theirs another's. Those
// that count lock waits count their own sessions', those that end listening sessions end their
// own Stores', and one that hears every change notified has a database of its own
// (ownDatabase). Tests run serially, before every parallel one starts, only when they check for
// leaked goroutines of their own or bound how late calls return (faults_test.go).
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

// ownSchema makes a schema of its own for t on the shared server, dropped when t ends, and
// returns a URL to the server whose sessions' search_path is that schema: Stores made on it by
// newStore or storeOn (in t, or in a child process given the URL) keep their tables there, and
// t's statements find them there. Their sweeps and lines are t's alone; their channels are
// not (see ownDatabase).
func ownSchema(t *testing.T) string {
	t.Helper()
	url := serverURL(t)
	schema, _ := newSchema(t, newPool(t, url), "own")
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// ownDatabase makes a database of its own for t on the server at url, dropped when t ends, and
// returns a URL to it. Notifications reach only the sessions of the database they are sent
// in: the change channel of its Stores is t's alone.
func ownDatabase(t *testing.T, url string) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "own_" + hex.EncodeToString(b[:])
	admin := newPool(t, url)
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)") })
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
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
