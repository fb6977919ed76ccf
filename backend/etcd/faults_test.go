package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// The history checks under faults (conformance/history) on etcd. history.Fault runs six mutex
// holders on two keys, each with a Store and a client of its own (separate processes, in
// effect), while the test pauses the server past the leases' TTL, kills and restarts it on its
// data, or cuts and holds its connections through a fault proxy; every store call is recorded
// and the history must be linearizable (etcd keeps its data through each fault, so no grant
// while a lease that cannot have expired holds the key, and no fence goes back). Beside it, a
// stale holder (staleRun) loses its lease in the fault and goes on writing, unaware, to a
// resource fenced in etcd itself: its writes after the next holder's must be refused.
//
// The history is checked with history.Linearizable, not history.Exclusive: Exclusive takes a
// lease as held until its holder releases it, which under faults (a lease lost, its Release
// cut off) it is not; Linearizable takes a lease as held until it may have expired.
//
// Each test that pauses, kills or cuts off a server starts one of its own (etcdtest.Start),
// and none is parallel: their checks bound how late calls return and losses are reported,
// which CPUs busy with the parallel tests would stretch. TTLs are whole seconds (etcd's
// granularity): a lease of 1s lives 1 to 1.5s after its last renewal (the package's resolution
// constant).

// noLeaks checks, after everything t started has been cleaned up, that no goroutine outlives it.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// faultHolders is the number of Stores history.Fault makes: one for each of its six workers,
// and one for the holder across the fault. Each Inject waits for them before its fault, so
// that the fault comes while the workload runs.
const faultHolders = 7

// faultStores returns a maker of Stores with opts, each with a client of its own (faultClient)
// of endpoint (the server's, or a fault proxy's URL), a wait until the workload has made its
// Stores, and the calls of those Stores (recorded in a Recorder of their own too, since
// history.Fault keeps its own to itself).
func faultStores(t *testing.T, endpoint string, opts ...etcd.Option) (newStore func() core.Store, made func(), ops func() []history.Op) {
	var n atomic.Int32
	var rec history.Recorder
	newStore = func() core.Store {
		s := history.Record(clientStore(t, faultClient(t, endpoint), opts...), &rec)
		n.Add(1)
		return s
	}
	made = func() { poll.Until(t, "the workload's Stores made", func() bool { return n.Load() == faultHolders }) }
	return newStore, made, rec.Ops
}

// faultClient returns a client of endpoints, closed when t ends, that waits at most half a
// second between its attempts to reconnect (gRPC's default waits a second, then 1.6, 2.6...):
// how soon a client finds a restarted or healed server is gRPC's business, and the default's
// waits, not the driver, would decide whether the lease held across a restart is kept.
func faultClient(t *testing.T, endpoints ...string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		})},
	})
	if err != nil {
		panic(err) // New fails only for a bad configuration; called off the test's goroutine too
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// servedAfter fails t unless each of the workload's keys is granted, after the fault, to a new
// Mutex on a Store of newStore's, within bound: the line serves again once the fault is over
// (a check of the workload's own calls after the fault depended on how many it had time to
// make, which a loaded machine cut to none).
func servedAfter(t *testing.T, newStore func() core.Store, ttl, bound time.Duration) {
	t.Helper()
	for _, key := range []string{"fault0", "fault1"} {
		m, err := primitives.NewMutex(newStore(), key, primitives.WithTTL(ttl), primitives.WithAcquireTimeout(bound))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Errorf("%s after the fault: %v", key, err)
			continue
		}
		t.Logf("%s granted %v after the fault's checks", key, time.Since(start).Round(time.Millisecond))
		l.Release(context.Background())
	}
}

// failures counts the calls in ops that failed, by kind and cause: a transaction cut in flight
// (Unavailable) may or may not have been applied, and the history's checks take it as either.
func failures(ops []history.Op) string {
	counts := map[string]int{}
	var order []string
	for _, op := range ops {
		if op.Err == nil {
			continue
		}
		cause := "other (" + op.Err.Error() + ")"
		if errors.Is(op.Err, context.Canceled) {
			cause = "canceled" // a refresh that Release cut short
		}
		switch msg := op.Err.Error(); {
		case errors.Is(op.Err, context.DeadlineExceeded), strings.Contains(msg, "DeadlineExceeded"), strings.Contains(msg, "deadline exceeded"):
			cause = "deadline"
		case strings.Contains(msg, "Unavailable"), strings.Contains(msg, "connection"), strings.Contains(msg, "EOF"):
			cause = "unavailable"
		case errors.Is(op.Err, core.ErrLost):
			cause = "lost"
		}
		k := op.Kind.String() + " " + cause
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	if len(order) == 0 {
		return "no call failed"
	}
	var b strings.Builder
	b.WriteString("calls failed: ")
	for i, k := range order {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, counts[k])
	}
	return b.String()
}

// clientStore returns a Store on c with opts, closed when t ends (before c).
func clientStore(t *testing.T, c *clientv3.Client, opts ...etcd.Option) *etcd.Store {
	s, err := etcd.New(c, opts...)
	if err != nil {
		panic(err) // only an invalid argument fails New; called off the test's goroutine too
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestFaultServerPausedPastTheTTL: the server is SIGSTOPped mid-workload for 3s, longer than
// any lease of TTL 1s lives unrenewed (1 to 1.5s), then continued: it revokes the expired
// leases as it resumes. Holders cannot refresh meanwhile: the lease held across the pause is
// reported lost by its deadline, calls return within their budget, the history is
// linearizable, and once the server is back each key is granted again. The stale holder,
// whose lease expires in the pause, has its fenced writes after the next holder's refused.
func TestFaultServerPausedPastTheTTL(t *testing.T) {
	testenv.SkipShort(t, "pauses a server past its leases' TTL")
	noLeaks(t)
	srv := etcdtest.Start(t)
	const ttl, pause = time.Second, 3 * time.Second
	// The Stores' sessions, which their places in lines are on, have etcd's shortest TTL, so
	// that the pause ends them too: every waiter's place goes, and the line must serve the
	// waiters that ask again.
	stores, made, ops := faultStores(t, srv.Endpoint(), etcd.WithSessionTTL(time.Second))
	stale := startStale(t, srv.Client(t), srv.Client(t), "stale", ttl)
	var paused time.Duration
	var resumed time.Time
	history.Fault{
		NewStore: stores,
		TTL:      ttl, Duration: 6 * time.Second,
		Linearizable: true, Lost: true,
		Inject: func() {
			made()
			time.Sleep(700 * time.Millisecond) // the workload's lead; the pause's length is the scenario
			at := time.Now()
			srv.Pause(t)
			time.Sleep(pause)
			srv.Resume(t)
			resumed = time.Now()
			paused = resumed.Sub(at)
			stale.next()
		},
	}.Run(t)
	servedAfter(t, stores, ttl, ttl+resolution+15*time.Second)
	f := stale.finish()
	t.Logf("paused %v (TTL %v); %s; %s", paused.Round(time.Millisecond), ttl, failures(ops()), f)
}

// TestFaultServerKilledAndRestarted: the server is SIGKILLed mid-workload and restarted on its
// data. Its data survive, so the history is linearizable and fences never go back. etcd renews
// every lease to its full TTL as it restarts (leases last longer, never shorter), so the lease
// held across the kill, refreshed once clients have reconnected, is kept. Its TTL is 6s: the
// refresh after the kill must come within the TTL less a refresh interval (2s) and the stop
// margin. Then each key is taken once more: a lease whose Release the kill cut off stays for a
// TTL after the restart, no longer.
func TestFaultServerKilledAndRestarted(t *testing.T) {
	testenv.SkipShort(t, "kills and restarts a server")
	noLeaks(t)
	srv := etcdtest.Start(t)
	const ttl = 6 * time.Second
	stores, made, ops := faultStores(t, srv.Endpoint())
	var down time.Duration
	var restarted time.Time
	history.Fault{
		NewStore: stores,
		TTL:      ttl, Duration: 6 * time.Second,
		Linearizable: true, Lost: false,
		Inject: func() {
			made()
			time.Sleep(time.Second)
			at := time.Now()
			srv.Kill(t)
			srv.Restart(t)
			restarted = time.Now()
			down = restarted.Sub(at)
		},
	}.Run(t)
	var waits []string
	for _, key := range []string{"fault0", "fault1"} {
		m, err := primitives.NewMutex(stores(), key, primitives.WithTTL(ttl), primitives.WithAcquireTimeout(ttl+resolution+10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := m.Acquire(context.Background())
		if err != nil {
			t.Fatalf("%s after the restart: %v", key, err)
		}
		if since := time.Since(restarted); since > ttl+resolution+2*time.Second {
			t.Errorf("%s was granted %v after the restart: longer than a TTL", key, since)
		}
		waits = append(waits, fmt.Sprintf("%s %v", key, time.Since(start).Round(time.Millisecond)))
		l.Release(context.Background())
	}
	t.Logf("down %v, from the kill until the restarted server answered; %s; then waited for %s",
		down.Round(time.Millisecond), failures(ops()), strings.Join(waits, ", "))
}

// TestFaultConnectionsCut: every Store's client reaches the server through a fault proxy that
// adds latency, cuts every connection ten times in a second (transactions cut in flight fail
// with Unavailable, applied or not: the history counts them as either), then holds all traffic
// for 3s, past the leases' TTL (a partition: the server, still running, expires them), before
// cutting and healing. The stale holder, which reaches the server through a proxy of its own,
// is cut off the same way: the writes it sent in the partition arrive as it heals, after the
// next holder's, and are refused.
func TestFaultConnectionsCut(t *testing.T) {
	testenv.SkipShort(t, "cuts and holds a server's connections")
	noLeaks(t)
	srv := etcdtest.Start(t)
	px, pxStale := srv.Proxy(t), srv.Proxy(t)
	const ttl, hold = time.Second, 3 * time.Second
	stores, made, ops := faultStores(t, "http://"+px.Addr)
	stale := startStale(t, srv.Client(t, "http://"+pxStale.Addr), srv.Client(t), "stale", ttl)
	var held time.Duration
	var healed time.Time
	history.Fault{
		NewStore: stores,
		TTL:      ttl, Duration: 8 * time.Second,
		Linearizable: true, Lost: true,
		Inject: func() {
			made()
			time.Sleep(500 * time.Millisecond)
			px.SetLatency(30 * time.Millisecond)
			time.Sleep(700 * time.Millisecond)
			px.SetLatency(0)
			for range 10 {
				px.Cut()
				time.Sleep(100 * time.Millisecond)
			}
			at := time.Now()
			px.Hold(true)
			pxStale.Hold(true)
			time.Sleep(hold)
			// The next holder takes the key and writes while the stale one is held.
			stale.next()
			poll.Until(t, "the next holder's first write accepted", stale.hasWritten)
			px.Cut()
			px.Hold(false)
			pxStale.Hold(false) // its held writes arrive now, not cut
			healed = time.Now()
			held = healed.Sub(at)
		},
	}.Run(t)
	servedAfter(t, stores, ttl, ttl+resolution+15*time.Second)
	f := stale.finish()
	t.Logf("held %v (TTL %v); %s; %s", held.Round(time.Millisecond), ttl, failures(ops()), f)
}

// TestFaultHolderStallsPastTTL: a holder whose refresh stops (a long GC pause) and that goes on
// writing after its TTL finds the key taken by another, with a higher fence: its writes after
// the next holder's, fenced in etcd, are refused.
func TestFaultHolderStallsPastTTL(t *testing.T) {
	testenv.SkipShort(t, "waits out a stalled holder's TTL")
	srv := etcdtest.Shared(t) // the shared server's goroutines are not this test's
	noLeaks(t)
	stale := startStale(t, srv.Client(t), srv.Client(t), uniqueKey(t), time.Second)
	stale.la.StopRefresh() // the stall begins
	stale.next()
	t.Log(stale.finish())
}

// TestFaultRepliesLost: every Store's client reaches the server through a fault proxy that
// loses every fifth read of the server's bytes: for a second each is held back 300 ms, past its
// caller's ctx (100 ms), and with it what follows on that connection (one HTTP/2 connection
// carries all of a client's calls), then delivered; for another it is dropped, its connection
// cut after 300 ms (calls in flight fail with Unavailable, applied or not; the client's retries
// are at their defaults). etcd ran each transaction it got, so the caller's give-back reaches
// it after it. The history is linearizable (a failed call may have taken effect), fences
// increase, and each key is free again within its TTL, the resolution and
// conformance.FreeBound of the workload's end. The lease held across the fault may lose a
// refresh's reply; if it is lost, it is reported by its deadline.
func TestFaultRepliesLost(t *testing.T) {
	testenv.SkipShort(t, "loses a server's replies for seconds")
	noLeaks(t)
	srv := etcdtest.Start(t)
	px := srv.Proxy(t)
	const ttl, hold = time.Second, 300 * time.Millisecond
	stores, made, ops := faultStores(t, "http://"+px.Addr)
	history.Fault{
		NewStore: stores,
		TTL:      ttl, Duration: 3 * time.Second, CallBudget: 100 * time.Millisecond,
		Linearizable: true, MayLose: true,
		FreeAfter: ttl + resolution + conformance.FreeBound,
		Inject: func() {
			made()
			time.Sleep(300 * time.Millisecond)
			px.LoseReplies(5, hold, false)
			time.Sleep(time.Second)
			px.LoseReplies(5, hold, true)
			time.Sleep(time.Second)
			px.LoseReplies(0, 0, false)
		},
	}.Run(t)
	t.Log(failures(ops()))
}
