package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The cost of an uncontended pair on a local server, beside the floor of two round trips: run
// with `go test -run '^$' -bench . -benchmem ./backend/postgres/`.

func BenchmarkRoundTripPair(b *testing.B) {
	pool := newPool(b, serverURL(b))
	ctx := context.Background()
	for b.Loop() {
		for range 2 {
			if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkStorePair(b *testing.B) {
	storePair(b, core.AcquireRequest{Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
}

// BenchmarkStorePairWaiting: the requests say they would wait, as a Mutex's do.
func BenchmarkStorePairWaiting(b *testing.B) {
	storePair(b, core.AcquireRequest{Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: core.MaxDuration})
}

// storePair acquires and releases req on a key of its own, b.N times.
func storePair(b *testing.B, req core.AcquireRequest) {
	s := newStore(b, serverURL(b))
	ctx := context.Background()
	req.Key = uniqueKey(b)
	cpu := clientCPU()
	for b.Loop() {
		res, err := s.Acquire(ctx, req)
		if err != nil || !res.Granted {
			b.Fatal(res, err)
		}
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: req.Key, Holder: req.Holder, Fence: res.Fence}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((clientCPU()-cpu).Microseconds())/float64(b.N), "client-CPU-µs/pair")
}

func BenchmarkMutexPair(b *testing.B) {
	m, err := primitives.NewMutex(newStore(b, serverURL(b)), uniqueKey(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cpu := clientCPU()
	for b.Loop() {
		l, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((clientCPU()-cpu).Microseconds())/float64(b.N), "client-CPU-µs/pair")
}

func BenchmarkStorePairNewHolders(b *testing.B) {
	s := newStore(b, serverURL(b))
	ctx, key := context.Background(), uniqueKey(b)
	i := 0
	for b.Loop() {
		i++
		holder := fmt.Sprintf("h%d", i)
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute})
		if err != nil || !res.Granted {
			b.Fatal(res, err)
		}
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder, Fence: res.Fence}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNotifyDelivery is the floor under a handoff's wake: one NOTIFY sent through the pool
// until a listening connection has it, with other sessions LISTENing on channels of their own
// (one per Store in a real deployment). PostgreSQL signals every listening backend of the
// database at each notifying commit, so the delivery slows with their number.
func BenchmarkNotifyDelivery(b *testing.B) {
	url := serverURL(b)
	for _, n := range []int{1, 4, 17} {
		b.Run(fmt.Sprintf("listeners=%d", n), func(b *testing.B) {
			ctx := context.Background()
			pool := newPool(b, url)
			var first *pgx.Conn
			for i := range n {
				c, err := pgx.Connect(ctx, url)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close(context.Background()) })
				if _, err := c.Exec(ctx, fmt.Sprintf("LISTEN bench_%d", i)); err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					first = c
				}
			}
			for b.Loop() {
				if _, err := pool.Exec(ctx, "SELECT pg_notify('bench_0', 'x')"); err != nil {
					b.Fatal(err)
				}
				if _, err := first.WaitForNotification(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPairBeforeAndAfterForgetting: the uncontended pair's two statements (Acquire's and
// Release's, as a Store sends them) on one key, on the schema of the release that kept every
// key's row (before) and on this one, whose release deletes the row and whose next acquire
// makes it again (after), in two schemas of one server. Each iteration runs one pair on each,
// so both see the same load; it reports each one's time and after/before:
// `go test -run '^$' -bench PairBeforeAndAfterForgetting -count 5 ./backend/postgres/`.
func BenchmarkPairBeforeAndAfterForgetting(b *testing.B) {
	pairsOnSchemas(b, []pairSchema{
		{name: "before", src: schemaBeforeForgetting, acquire: acquireBeforeLockDelay},
		{name: "after", acquire: acquireWithLockDelay(0)},
	})
}

// BenchmarkPairBeforeAndAfterLockDelay: the uncontended pair as a Store sends it, on the schema
// of the release before the lock delay (before), and on this one for a lease without a delay
// (after) and with one (delayed: released in time, it leaves none), in schemas of one server.
// Each iteration runs one pair on each, so all see the same load; it reports each one's time
// and the database's CPU (its backend's, one connection per schema) per pair, and the ratios to
// before: `go test -run '^$' -bench PairBeforeAndAfterLockDelay -count 5 ./backend/postgres/`.
func BenchmarkPairBeforeAndAfterLockDelay(b *testing.B) {
	pairsOnSchemas(b, []pairSchema{
		{name: "before", src: schemaBeforeLockDelay, acquire: acquireBeforeLockDelay},
		{name: "after", acquire: acquireWithLockDelay(0)},
		{name: "delayed", acquire: acquireWithLockDelay(time.Minute)},
	})
}

// The uncontended acquire's call as the Store sent it before the lock delay, and as it sends it
// now with a lease's delay (%s: the schema, quoted).
const acquireBeforeLockDelay = "SELECT granted, fence, retry, err FROM %s.leasehold_acquire($1::bytea, $2::bytea, 1, 1, 60000000, 0, ''::bytea, 0, 0, NULL, NULL, NULL, NULL)"

func acquireWithLockDelay(d time.Duration) string {
	return fmt.Sprintf("SELECT granted, fence, retry, err FROM %%s.leasehold_acquire($1::bytea, $2::bytea, 1, 1, 60000000, 0, ''::bytea, 0, 0, NULL, NULL, NULL, NULL, %d)",
		d.Microseconds())
}

// pairSchema is a schema the pair runs on: src is its schema file (empty: this version's), and
// acquire the acquire's call with %s for the schema.
type pairSchema struct {
	name, src, acquire string
}

// pairsOnSchemas runs the uncontended pair on each of schemas in turn, b.N times each, over one
// connection per schema, and reports each one's time and its backend's CPU per pair, and the
// ratios to the first.
func pairsOnSchemas(b *testing.B, schemas []pairSchema) {
	ctx := context.Background()
	url := serverURL(b)
	admin := newPool(b, url)
	base := strings.ToLower(strings.ReplaceAll(uniqueKey(b), "-", "_"))
	type run struct {
		acquire, release string
		pool             *pgxpool.Pool
		pid              int
		took, cpu        time.Duration
	}
	runs := make([]*run, len(schemas))
	for i, sc := range schemas {
		name := base + "_" + sc.name
		var ddl string
		if sc.src == "" {
			var err error
			if ddl, err = postgres.SchemaSQL(postgres.WithSchema(name)); err != nil {
				b.Fatal(err)
			}
		} else {
			ddl = postgres.SchemaSQLFrom(sc.src, name)
		}
		q := pgx.Identifier{name}.Sanitize()
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+q+"; "+ddl); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA "+q+" CASCADE") })
		pool, err := pgxpool.NewWithConfig(ctx, poolConfig(b, url, func(c *pgxpool.Config) { c.MaxConns = 1 }))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		r := &run{acquire: fmt.Sprintf(sc.acquire, q), release: "SELECT " + q + ".leasehold_release($1::bytea, $2::bytea, $3::bigint)", pool: pool}
		if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&r.pid); err != nil {
			b.Fatal(err)
		}
		runs[i] = r
	}
	key, holder := []byte("k"), []byte("h")
	pair := func(r *run) {
		var (
			granted, ok  bool
			fence, retry int64
			msg          *string
		)
		if err := r.pool.QueryRow(ctx, r.acquire, key, holder).Scan(&granted, &fence, &retry, &msg); err != nil || !granted {
			b.Fatal(granted, err)
		}
		if err := r.pool.QueryRow(ctx, r.release, key, holder, fence).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	for _, r := range runs { // statements prepared, plans cached
		for range 10 {
			pair(r)
		}
	}
	for _, r := range runs {
		r.cpu = -backendCPU(b, r.pid)
	}
	for b.Loop() {
		for _, r := range runs {
			start := time.Now()
			pair(r)
			r.took += time.Since(start)
		}
	}
	for i, r := range runs {
		r.cpu += backendCPU(b, r.pid)
		name := schemas[i].name
		b.ReportMetric(float64(r.took.Nanoseconds())/float64(b.N), name+"-ns/pair")
		b.ReportMetric(float64(r.cpu.Nanoseconds())/float64(b.N), name+"-db-CPU-ns/pair")
		if i > 0 {
			b.ReportMetric(float64(r.took)/float64(runs[0].took), name+"/"+schemas[0].name)
			b.ReportMetric(float64(r.cpu)/float64(runs[0].cpu), name+"/"+schemas[0].name+"-db-CPU")
		}
	}
}

// backendCPU returns the CPU time the server's process pid has used (/proc's schedstat, in ns).
func backendCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		b.Skipf("the database's CPU: %v", err)
	}
	var ns int64
	if _, err := fmt.Sscan(string(raw), &ns); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ns)
}

// BenchmarkMutexHandoff: 16 workers (and 2), each with a Store and pool of its own (16 processes,
// as peerbench runs them), take turns on one Mutex: a worker releases and at once asks again, so
// every grant goes down the line. It reports the handoffs per second, the share of grants made
// to another worker than the last holder, and the median and 99th percentile of a handoff: from
// the moment the holder starts its release to the moment the next holder's Acquire returns, and
// the median of the Release calls alone (the rest of a handoff is the wake).
// `go test -run '^$' -bench MutexHandoff -benchtime 3s ./backend/postgres/`.
func BenchmarkMutexHandoff(b *testing.B) {
	for _, workers := range []int{2, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { mutexHandoff(b, workers) })
	}
}

// mutexHandoff is BenchmarkMutexHandoff with workers Stores.
func mutexHandoff(b *testing.B, workers int) {
	url := serverURL(b)
	key := uniqueKey(b)
	ms := make([]*primitives.Mutex, workers)
	for i := range ms {
		cfg := poolConfig(b, url, func(c *pgxpool.Config) { c.MaxConns = 4 })
		m, err := primitives.NewMutex(storeOn(b, cfg), key)
		if err != nil {
			b.Fatal(err)
		}
		ms[i] = m
	}
	ctx := context.Background()
	for _, m := range ms { // connections open, statements prepared
		l, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		l.Release(ctx)
	}
	var (
		mu        sync.Mutex
		last      = -1
		released  time.Time
		handoffs  []time.Duration
		releases  []time.Duration
		grants    int
		toAnother int
		n         atomic.Int64
	)
	cpu := clientCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n.Add(1) <= int64(b.N) {
				l, err := m.Acquire(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				grants++
				if last != i && last >= 0 {
					toAnother++
					handoffs = append(handoffs, now.Sub(released))
				}
				last = i
				released = time.Now()
				mu.Unlock()
				began := time.Now()
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				took := time.Since(began)
				mu.Lock()
				releases = append(releases, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(handoffs)
	slices.Sort(releases)
	if len(releases) > 0 {
		b.ReportMetric(float64(releases[len(releases)/2].Microseconds()), "release-p50-µs")
	}
	if len(handoffs) > 0 {
		b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(grants)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(100*float64(toAnother)/float64(max(grants-1, 1)), "%to-another")
	b.ReportMetric(float64((clientCPU()-cpu).Microseconds())/float64(max(grants, 1)), "client-CPU-µs/pair")
}
