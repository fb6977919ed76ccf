package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/backend/internal/faultproxy"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// The history checks under faults (conformance/history): a workload of six mutex holders on two
// keys, each with a Store and pool of its own, while the server is killed, paused or cut off,
// and a holder stalls past its TTL. PostgreSQL keeps its data through each, so every history
// must be linearizable and fences never go back.
//
// They run serially, before the parallel tests: their checks bound how late calls return and
// losses are reported, which CPUs busy with the conformance runs would stretch.

// noLeaks checks, after everything t started has been cleaned up, that no goroutine outlives it.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// faultStores returns a maker of Stores on url, each with a pool of its own whose connections
// give up on a server that does not answer within a second (so a paused server or a partition
// fails calls instead of hanging them past their budget), and a wait for the workload's Stores.
func faultStores(t *testing.T, url string) (newStore func() core.Store, made func()) {
	var n atomic.Int32
	newStore = func() core.Store {
		s := storeOn(t, poolConfig(t, url+"&connect_timeout=1", nil))
		n.Add(1)
		return s
	}
	return newStore, func() { poll.Until(t, "the workload's Stores made", func() bool { return n.Load() == faultHolders }) }
}

// faultHolders is the number of Stores history.Fault makes: one for each of its six workers,
// and one for the holder across the fault. Each Inject waits for them before its fault: on a
// loaded machine, making them took longer than the lead its fault gives the workload, and New
// failed on the server already killed (TestFaultServerKilledAndRestarted failed so beside
// another suite).
const faultHolders = 7

// TestFaultServerKilledAndRestarted: PostgreSQL is SIGKILLed mid-workload and restarted on its
// data. Leases survive (committed before the kill), fences never go back, calls fail only while
// it is down, and a lease held across it, refreshed in time, is kept.
func TestFaultServerKilledAndRestarted(t *testing.T) {
	testenv.SkipShort(t, "kills and restarts a server")
	noLeaks(t)
	srv := pgtest.StartServer(t)
	stores, made := faultStores(t, srv.URL)
	history.Fault{
		NewStore: stores,
		TTL:      3 * time.Second, Duration: 4 * time.Second,
		Linearizable: true, Lost: false,
		Inject: func() {
			made()
			time.Sleep(time.Second)
			srv.Kill(t)
			srv.Restart(t)
		},
	}.Run(t)
}

// TestFaultServerPausedPastTTL: SIGSTOP for three TTLs, then SIGCONT. Holders cannot refresh:
// the lease held across it is reported lost by its deadline; calls return within their budget;
// the history is linearizable.
func TestFaultServerPausedPastTTL(t *testing.T) {
	testenv.SkipShort(t, "pauses a server past its TTLs")
	noLeaks(t)
	srv := pgtest.StartServer(t)
	const ttl = 400 * time.Millisecond
	stores, made := faultStores(t, srv.URL)
	history.Fault{
		NewStore: stores,
		TTL:      ttl, Duration: 3 * time.Second,
		Linearizable: true, Lost: true,
		Inject: func() {
			made()
			time.Sleep(600 * time.Millisecond)
			srv.Pause()
			time.Sleep(3 * ttl)
			srv.Resume()
		},
	}.Run(t)
}

// TestFaultNetwork: the clients (pools and listening connections) reach the server through a
// proxy that adds latency, cuts every connection, then holds all traffic for three TTLs (a
// partition) before cutting and healing.
func TestFaultNetwork(t *testing.T) {
	testenv.SkipShort(t, "cuts and holds a server's connections")
	noLeaks(t)
	srv := pgtest.StartServer(t)
	px := faultproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", srv.Port))
	const ttl = 400 * time.Millisecond
	stores, made := faultStores(t, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", px.Addr))
	history.Fault{
		NewStore: stores,
		TTL:      ttl, Duration: 4 * time.Second,
		Linearizable: true, Lost: true,
		Inject: func() {
			made()
			time.Sleep(500 * time.Millisecond)
			px.SetLatency(30 * time.Millisecond)
			time.Sleep(700 * time.Millisecond)
			px.SetLatency(0)
			px.Cut()
			time.Sleep(300 * time.Millisecond)
			px.Hold(true)
			time.Sleep(3 * ttl)
			px.Cut()
			px.Hold(false)
		},
	}.Run(t)
}

// TestFaultHolderStallsPastTTL: a holder whose refresh stops (a long GC pause) and that resumes
// after its TTL finds the lock taken by another, with a higher fence; its write, fenced with
// AcceptFence in its own transaction, is refused and rolled back with the write itself.
func TestFaultHolderStallsPastTTL(t *testing.T) {
	testenv.SkipShort(t, "stalls a holder past its TTL")
	url, key := serverURL(t), uniqueKey(t) // the shared server's goroutine is not this test's
	noLeaks(t)
	s, pool := fencePool(t)
	var rec history.Recorder
	const ttl = 300 * time.Millisecond
	a, _ := primitives.NewMutex(history.Record(newStore(t, url), &rec), key, primitives.WithTTL(ttl))
	b, _ := primitives.NewMutex(history.Record(newStore(t, url), &rec), key, primitives.WithTTL(ttl), primitives.WithAcquireTimeout(5*time.Second))
	ctx := context.Background()
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, s, pool, key, la.Fence()); err != nil {
		t.Fatalf("the first holder's write: %v", err)
	}
	la.StopRefresh() // the pause begins
	lb, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, s, pool, key, lb.Fence()); err != nil {
		t.Fatalf("the second holder's write: %v", err)
	}
	// The pause ends: the first holder, unaware, writes with its old fence.
	if err := write(ctx, s, pool, key, la.Fence()); !errors.Is(err, postgres.ErrStaleFence) {
		t.Errorf("the stale holder's write (fence %d after %d): %v, want ErrStaleFence", la.Fence(), lb.Fence(), err)
	}
	if got, want := writes(t, pool, key), []int64{int64(la.Fence()), int64(lb.Fence())}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("committed writes %v, want %v", got, want)
	}
	if err := la.Release(ctx); !errors.Is(err, core.ErrLost) {
		t.Errorf("the stale holder's Release: %v, want ErrLost", err)
	}
	lb.Release(ctx)
	ops := rec.Ops()
	if v := append(history.Linearizable(ops, time.Minute), history.FencesIncrease(ops)...); len(v) > 0 {
		t.Errorf("history: %v", v)
	}
}

// TestFaultRepliesLost: the clients (pools and listening connections) reach the server through
// a proxy that loses every fifth reply: for a second each reply is held back 300 ms, past its
// caller's ctx (100 ms), then delivered; for another it is dropped, its connection cut after
// 300 ms. The server ran each statement, so the caller's give-back reaches it after it. The
// history is linearizable (a failed call may have taken effect), fences increase, and each key
// is free again within its TTL and conformance.FreeBound of the workload's end. The lease held
// across the fault may lose a refresh's reply; if it is lost, it is reported by its deadline.
func TestFaultRepliesLost(t *testing.T) {
	testenv.SkipShort(t, "loses a server's replies for seconds")
	noLeaks(t)
	srv := pgtest.StartServer(t)
	px := faultproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", srv.Port))
	const ttl, hold = time.Second, 300 * time.Millisecond
	stores, made := faultStores(t, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", px.Addr))
	history.Fault{
		NewStore: stores,
		TTL:      ttl, Duration: 3 * time.Second, CallBudget: 100 * time.Millisecond,
		Linearizable: true, MayLose: true,
		FreeAfter: ttl + conformance.FreeBound,
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
}
