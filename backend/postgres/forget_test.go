package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// noRows is keyRows of a key that left nothing behind.
const noRows = "keys: \nleases: \nwaiters: \nleft: \n"

// sweep runs a sweep of s now, once no other sweep of its tables is under way (one of its Stores'
// own, about one a minute), and fails t on an error.
func sweep(t testing.TB, s *postgres.Store) {
	t.Helper()
	poll.Until(t, "a sweep of the test's own to run", func() bool {
		ran, _, _, _, err := s.Sweep(context.Background())
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		return ran
	})
}

// TestReleasedKeyLeavesNothingBehind: once the last holder releases a key that nobody waits for
// or watches, no row of it is left — after a lone lease, after a handoff through the line, after
// a waiter gave up, and after a try given up in flight once its minute is over.
func TestReleasedKeyLeavesNothingBehind(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := ownSchema(t) // it sweeps
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	req := func(key, holder string, wait time.Duration) core.AcquireRequest {
		return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: time.Minute, Wait: wait}
	}
	grant := func(r core.AcquireRequest) {
		t.Helper()
		if res, err := s.Acquire(ctx, r); err != nil || !res.Granted {
			t.Fatalf("Acquire(%q): %+v, %v", r.Holder, res, err)
		}
	}
	release := func(key, holder string) {
		t.Helper()
		if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder}); err != nil || !ok {
			t.Fatalf("Release(%q): %v, %v", holder, ok, err)
		}
	}
	left := func(what, key string) {
		t.Helper()
		if got := keyRows(t, pool, key); got != noRows {
			t.Errorf("%s: rows left:\n%s", what, got)
		}
	}

	key := uniqueKey(t) + "-lone"
	grant(req(key, "a", time.Minute))
	release(key, "a")
	left("a lone lease released", key)

	key = uniqueKey(t) + "-handoff"
	grant(req(key, "a", 0))
	w := enroll(t, s, req(key, "b", time.Minute))
	release(key, "a")
	<-w.C()
	grant(req(key, "b", time.Minute))
	w.Close()
	release(key, "b")
	left("a handoff through the line, released", key)

	key = uniqueKey(t) + "-gaveup"
	grant(req(key, "a", 0))
	enroll(t, s, req(key, "b", time.Minute)).Close()
	if _, err := s.Inspect(ctx, key); err != nil { // waits for the leave
		t.Fatal(err)
	}
	release(key, "a")
	left("a waiter gave up, the holder released", key)

	key = uniqueKey(t) + "-inflight"
	s.LeaveTry(key, "b", 7)
	if got := keyRows(t, pool, key); !strings.HasPrefix(got, "keys: \nleases: \nwaiters: \nleft: ") || !strings.Contains(got, `"try":7`) {
		t.Fatalf("a try given up in flight on a free key: rows\n%s\nwant only its left row", got)
	}
	if _, err := pool.Exec(ctx, "UPDATE leasehold_left SET expires = expires - 60000000 WHERE kh = sha256($1)", []byte(key)); err != nil {
		t.Fatal(err) // its minute is over
	}
	sweep(t, s)
	left("a try given up in flight, its minute over, swept", key)
}

// TestSweepRemovesWhatNobodyWillUse: rows left on keys nobody uses again — a lease that expired
// unreleased, the places of waiters whose process died (waits of ten minutes) and of a waiter
// that stopped polling, a watch that lapsed — go at the next sweep; a key held, or with a live
// waiter, keeps its rows.
func TestSweepRemovesWhatNobodyWillUse(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	t.Parallel()
	url := ownSchema(t) // it makes rows dead by hand and sweeps
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	sweep(t, s) // the Stores' own sweeps, a minute apart, now leave the dead rows to the test's
	// short keys are held by a lease that expires, unreleased, once the waiters below are in
	// line: by hand, since a short TTL could end before a loaded machine has them there.
	var shorts []string
	short := func(key string) {
		t.Helper()
		if res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "crashed", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
			t.Fatalf("Acquire: %+v, %v", res, err)
		}
		shorts = append(shorts, key)
	}

	expired := uniqueKey(t) + "-expired"
	short(expired)

	dead := uniqueKey(t) + "-dead"
	short(dead)
	child := exec.Command(os.Args[0], "-test.run=^TestHelperDeadWaiters$", "-test.count=1")
	child.Env = append(os.Environ(), "LEASEHOLD_DEAD_WAITERS="+url, "LEASEHOLD_DEAD_KEY="+dead)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { child.Wait(); close(exited) }()
	t.Cleanup(func() { child.Process.Kill(); <-exited })
	poll.Until(t, "the child's ten waiters in line", func() bool {
		snap, err := s.Inspect(ctx, dead)
		return err == nil && len(snap.Waiters) == 10
	})
	child.Process.Kill()
	<-exited
	poll.Until(t, "the server to see the child's listening connection close", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM leasehold_waiters w JOIN pg_stat_activity a ON a.pid = w.pid
			WHERE w.kh = sha256($1)`, []byte(dead)).Scan(&n)
		return err == nil && n == 0
	})

	silent := uniqueKey(t) + "-silent"
	short(silent)
	enroll(t, s, core.AcquireRequest{Key: silent, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: core.MaxDuration})
	// A place taken while its Store could not listen, whose holder last asked 11 minutes ago.
	if _, err := pool.Exec(ctx, "UPDATE leasehold_waiters SET pid = NULL, started = NULL, tried = tried - 660000000 WHERE kh = sha256($1)",
		[]byte(silent)); err != nil {
		t.Fatal(err)
	}

	watched := uniqueKey(t) + "-watched"
	wt, err := s.Watch(ctx, watched)
	if err != nil {
		t.Fatal(err)
	}
	wt.Close()
	if _, err := pool.Exec(ctx, "UPDATE leasehold_keys SET watched_until = 0 WHERE kh = sha256($1)", []byte(watched)); err != nil {
		t.Fatal(err) // its 30 s are over
	}

	held := uniqueKey(t) + "-held"
	if res, err := s.Acquire(ctx, core.AcquireRequest{Key: held, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute}); err != nil || !res.Granted {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	waiting := uniqueKey(t) + "-waiting"
	short(waiting)
	enroll(t, s, core.AcquireRequest{Key: waiting, Holder: "w", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})

	for _, key := range shorts {
		if _, err := pool.Exec(ctx, "UPDATE leasehold_leases SET expires = 0 WHERE kh = sha256($1)", []byte(key)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the short leases to expire", func() bool {
		for _, key := range []string{expired, dead, silent, waiting} {
			if snap, err := s.Inspect(ctx, key); err != nil || len(snap.Leases) != 0 {
				return false
			}
		}
		return true
	})
	for _, key := range []string{expired, dead, silent, watched} {
		if keyRows(t, pool, key) == noRows {
			t.Fatalf("%s: no rows before the sweep", key)
		}
	}
	sweep(t, s)
	for _, key := range []string{expired, dead, silent, watched} {
		if got := keyRows(t, pool, key); got != noRows {
			t.Errorf("%s: rows left after the sweep:\n%s", key, got)
		}
	}
	if snap, err := s.Inspect(ctx, held); err != nil || len(snap.Leases) != 1 {
		t.Errorf("the held key after the sweep: %+v, %v; want its lease", snap, err)
	}
	if snap, err := s.Inspect(ctx, waiting); err != nil || len(snap.Waiters) != 1 {
		t.Errorf("the key with a live waiter after the sweep: %+v, %v; want its waiter", snap, err)
	}
}

// TestRaisedFenceKeepsTheKeyRow: a key whose last fence was raised above the database's clock (a
// Redlock node's) keeps its row after its release, so the next grant's fence is above it; once
// the clock passes the fence the row goes, and a grant after that still gets a higher fence.
func TestRaisedFenceKeepsTheKeyRow(t *testing.T) {
	testenv.SkipShort(t, "makes tables in a schema, prefix or database of its own")
	testenv.SkipShort(t, "waits 2s for the clock to pass the fence")
	t.Parallel() // it waits for the clock to pass the fence; it sweeps in a schema of its own
	url, key := ownSchema(t), uniqueKey(t)
	ctx := context.Background()
	s, pool := newStore(t, url), newPool(t, url)
	var now int64
	if err := pool.QueryRow(ctx, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint").Scan(&now); err != nil {
		t.Fatal(err)
	}
	floor := uint64(now) + uint64(2*time.Second/time.Microsecond)
	req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	res, err := s.AcquireAbove(ctx, req, floor)
	if err != nil || !res.Granted || res.Fence < floor {
		t.Fatalf("AcquireAbove(%d): %+v, %v", floor, res, err)
	}
	last := res.Fence
	grantAndRelease := func(what string) {
		t.Helper()
		res, err := s.Acquire(ctx, req)
		if err != nil || !res.Granted || res.Fence <= last {
			t.Fatalf("%s: %+v, %v; want a fence above %d", what, res, err, last)
		}
		last = res.Fence
		if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: res.Fence}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a", Fence: res.Fence}); err != nil {
		t.Fatal(err)
	}
	sweep(t, s)
	if got := keyRows(t, pool, key); !strings.Contains(got, fmt.Sprintf(`"fence":%d`, last)) {
		t.Fatalf("a released key whose fence is above the clock: rows\n%s\nwant its row kept", got)
	}
	grantAndRelease("the grant after the raised fence's release")
	poll.Until(t, "the database's clock to pass the raised fence", func() bool {
		var passed bool
		err := pool.QueryRow(ctx, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint > $1", int64(last)).Scan(&passed)
		return err == nil && passed
	})
	sweep(t, s)
	if got := keyRows(t, pool, key); got != noRows {
		t.Errorf("once the clock passed the fence, after a sweep: rows left\n%s", got)
	}
	grantAndRelease("the grant after the key's row went")
}

// TestForgottenKeysKeepExclusion: Mutex loops over three keys, through four Stores, with sweeps
// running all along, delete and make the keys' rows again and again; no two holders are ever
// inside one key at once, no operation fails, and no row is left at the end.
func TestForgottenKeysKeepExclusion(t *testing.T) {
	testenv.SkipShort(t, "four Stores race sweeps for seconds")
	t.Parallel()
	url := ownSchema(t) // it sweeps all along
	ctx := context.Background()
	stores := make([]*postgres.Store, 4)
	for i := range stores {
		stores[i] = newStore(t, url)
	}
	base := uniqueKey(t)
	keys := []string{base + "-0", base + "-1", base + "-2"}
	occ := make([]*conformance.Occupancy, len(keys))
	for i := range occ {
		occ[i] = conformance.NewOccupancy(1)
	}
	const workers, rounds = 12, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := stores[w%len(stores)]
			for r := range rounds {
				k := (w + r) % len(keys)
				m, _ := primitives.NewMutex(s, keys[k], primitives.WithTTL(time.Minute))
				var (
					l   core.Lease
					err error
				)
				if r%3 == 0 {
					if l, err = m.TryAcquire(ctx); errors.Is(err, core.ErrNotAcquired) {
						continue
					}
				} else {
					l, err = m.Acquire(ctx)
				}
				if err != nil {
					t.Errorf("acquire %q: %v", keys[k], err)
					return
				}
				leave := occ[k].Enter(1)
				leave()
				if err := l.Release(ctx); err != nil {
					t.Errorf("release %q: %v", keys[k], err)
					return
				}
			}
		})
	}
	stop := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, _, _, err := stores[0].Sweep(ctx); err != nil {
				t.Errorf("Sweep: %v", err)
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	sweeper.Wait()
	pool := newPool(t, url)
	for i, key := range keys {
		if v := occ[i].Violations(); len(v) > 0 {
			t.Errorf("%s: %v", key, v)
		}
		if got := keyRows(t, pool, key); got != noRows {
			t.Errorf("%s: rows left:\n%s", key, got)
		}
	}
}
