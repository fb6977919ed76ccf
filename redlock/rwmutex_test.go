package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/conformance/scenario"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
	"github.com/leasehold/leasehold/redlock"
)

// RWMutex over Redlock: of memory nodes (which can fail, see node) and of real redis-servers.
// Redlock keeps no line, so a writer waits with its intent (intentHeld) and no Inspect reports
// waiters. The scenarios are those of conformance/scenario, as on every store; the node faults
// and the intent's corners are Redlock's own.

// intentHeld reports whether a writer's intent is held on key over s: a writer waits.
func intentHeld(s core.Store, key string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		snap, err := s.Inspect(ctx, key+"\x00writer")
		return err == nil && len(snap.Leases) > 0
	}
}

// redlocks returns n Redlock Stores over the same nodes, as n processes would have.
func redlocks(t *testing.T, ss []core.Store, n int) []core.Store {
	var out []core.Store
	for range n {
		out = append(out, mustNew(t, ss))
	}
	return out
}

func TestRWMutexOverRedlockExcludesAndShares(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	var rws []*primitives.RWMutex
	for _, s := range redlocks(t, ss, 3) {
		rws = append(rws, scenario.MustRWMutex(t, s, "rw", primitives.WithRetryInterval(time.Millisecond)))
	}
	if peak := scenario.RWStress(t, rws, 8, 30, 500*time.Microsecond); peak < 2 {
		t.Errorf("at most %d reader at once: readers did not share the key", peak)
	}
}

func TestRWMutexOverRedlockRedisServersExcludesAndShares(t *testing.T) {
	t.Parallel() // servers of its own: runs beside the other real-server tests
	h := startRedisHarness(t)
	var rws []*primitives.RWMutex
	for range 3 {
		rws = append(rws, scenario.MustRWMutex(t, h.NewStore(t), "rw", primitives.WithRetryInterval(time.Millisecond), primitives.WithAcquireTimeout(time.Minute)))
	}
	if peak := scenario.RWStress(t, rws, 8, 15, time.Millisecond); peak < 2 {
		t.Errorf("at most %d reader at once: readers did not share the key", peak)
	}
}

func TestRWMutexOverRedlockWriterNotStarved(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := redlocks(t, ss, 2)
	rd := scenario.MustRWMutex(t, s[0], "rw")
	wr := scenario.MustRWMutex(t, s[1], "rw", primitives.WithAcquireTimeout(5*time.Second))
	scenario.WriterNotStarved(t, rd, wr, intentHeld(s[0], "rw"))
}

func TestRWMutexOverRedlockRedisServersWriterNotStarved(t *testing.T) {
	h := startRedisHarness(t)
	rs, ws := h.NewStore(t), h.NewStore(t)
	rd := scenario.MustRWMutex(t, rs, "rw")
	wr := scenario.MustRWMutex(t, ws, "rw", primitives.WithAcquireTimeout(5*time.Second))
	scenario.WriterNotStarved(t, rd, wr, intentHeld(rs, "rw"))
}

// TestRWMutexOverRedlockWithANodeDown: with one node of three down, a writer acquires and
// excludes readers and writers; once it leaves, readers acquire together and exclude writers;
// and a stress run keeps exclusion with the node down.
func TestRWMutexOverRedlockWithANodeDown(t *testing.T) {
	ns, ss := nodes(core.SystemClock{}, 3)
	ns[1].set(true, 0)
	ctx := context.Background()
	s := redlocks(t, ss, 3)
	a, b, c := scenario.MustRWMutex(t, s[0], "rw"), scenario.MustRWMutex(t, s[1], "rw"), scenario.MustRWMutex(t, s[2], "rw")
	w, err := a.Acquire(ctx)
	if err != nil {
		t.Fatalf("writer with 2 of 3 nodes up: %v", err)
	}
	if _, err := b.TryAcquireRead(ctx); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("reader while the writer holds: %v, want ErrNotAcquired", err)
	}
	if _, err := c.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("second writer while the writer holds: %v, want ErrNotAcquired", err)
	}
	if st, err := c.Inspect(ctx); err != nil || !st.Writing || st.Writer.Holder != w.Holder() || len(st.Readers) != 0 || len(st.Waiters) != 0 {
		t.Fatalf("Inspect with the writer holding: %+v, %v", st, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r1, err := b.AcquireRead(ctx)
	if err != nil {
		t.Fatalf("reader with 2 of 3 nodes up: %v", err)
	}
	r2, err := c.AcquireRead(ctx)
	if err != nil {
		t.Fatalf("second reader with 2 of 3 nodes up: %v", err)
	}
	if _, err := a.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
		t.Fatalf("writer while two read: %v, want ErrNotAcquired", err)
	}
	if st, err := a.Inspect(ctx); err != nil || st.Writing || len(st.Readers) != 2 {
		t.Fatalf("Inspect with two readers: %+v, %v", st, err)
	}
	r1.Release(ctx)
	r2.Release(ctx)

	var rws []*primitives.RWMutex
	for _, st := range s {
		rws = append(rws, scenario.MustRWMutex(t, st, "stress", primitives.WithRetryInterval(time.Millisecond)))
	}
	scenario.RWStress(t, rws, 6, 20, 500*time.Microsecond)
}

func TestRWMutexOverRedlockWaitingWriterHoldsBackTries(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := mustNew(t, ss)
	scenario.WaitingWriterHoldsBackTries(t, func() *primitives.RWMutex { return scenario.MustRWMutex(t, s, "rw") }, intentHeld(s, "rw"))
}

func TestRWMutexOverRedlockInspect(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := mustNew(t, ss)
	scenario.RWInspect(t, func(v string) *primitives.RWMutex { return scenario.MustRWMutex(t, s, "rw", primitives.WithValue(v)) }, false)
}

// TestRWMutexOverRedlockReaderWaitsWithANodeDownAndOneSlow: with node 1 down and node 0 slower
// (20ms) than node 2, a reader that finds the writer holding waits for it and is granted once it
// leaves. The reader's tries are refused by node 2 and fail on node 1, which decides them before
// node 0 answers; that is a refusal (the key is busy), not a failure of the store.
func TestRWMutexOverRedlockReaderWaitsWithANodeDownAndOneSlow(t *testing.T) {
	ns, ss := nodes(core.SystemClock{}, 3)
	ns[1].set(true, 0)
	ns[0].set(false, 20*time.Millisecond)
	rl := &refusals{Store: mustNew(t, ss)}
	ctx := context.Background()
	rw := scenario.MustRWMutex(t, rl, "rw", primitives.WithAcquireTimeout(5*time.Second))
	w, err := rw.Acquire(ctx)
	if err != nil {
		t.Fatalf("writer with 2 of 3 nodes up: %v", err)
	}
	got := make(chan core.Lease, 1)
	scenario.GoBackground(t, func(ctx context.Context) {
		l, err := rw.AcquireRead(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("the reader waiting for the writer: %v", err)
		}
		got <- l
	})
	poll.Until(t, "the reader refused twice", func() bool {
		select {
		case <-got:
			t.Fatal("the reader's Acquire returned while the writer held")
		default:
		}
		return rl.n.Load() >= 2
	})
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the reader was not granted within 10s of the writer's release")
	}
}

// TestRWMutexOverRedlockTryAcquireDefersToAWaitingWriter: TryAcquire refuses while anyone waits
// for the key. Over Redlock a writer waits with its intent, between retries: when the reader in
// its way leaves, a second writer's TryAcquire must not take the lock ahead of it, as a reader's
// TryAcquireRead does not.
func TestRWMutexOverRedlockTryAcquireDefersToAWaitingWriter(t *testing.T) {
	s, r := readOverRedlock(t)
	ctx := context.Background()
	// The writer waits while r reads: a reader's release would wake it, so r holds on until the
	// end, and only the writer's intent can refuse another reader.
	giveUp := waitingWriter(t, s, primitives.WithRetryInterval(time.Hour))
	defer r.Release(ctx)
	other := scenario.MustRWMutex(t, s, "rw")
	if l, err := other.TryAcquireRead(ctx); !errors.Is(err, core.ErrNotAcquired) {
		t.Errorf("TryAcquireRead while a writer waits: %v, want ErrNotAcquired", err)
		if l != nil {
			l.Release(ctx)
		}
	}
	if l, err := other.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
		t.Errorf("a second writer's TryAcquire while a writer waits: %v, want ErrNotAcquired", err)
		if l != nil {
			l.Release(ctx)
		}
	}
	giveUp()
}

// waitingWriter starts a writer's Acquire on "rw" over s (an RWMutex with opts) and returns
// once it waits with its intent held. giveUp ends the wait and returns once the writer has
// given up; t's end ends the wait too.
func waitingWriter(t *testing.T, s core.Store, opts ...primitives.Option) (giveUp func()) {
	t.Helper()
	waiting := scenario.MustRWMutex(t, s, "rw", opts...)
	ctx := context.Background()
	wctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	scenario.GoBackground(t, func(context.Context) {
		l, err := waiting.Acquire(wctx)
		if err == nil {
			l.Release(ctx)
		}
		gaveUp <- err
	})
	t.Cleanup(cancel) // before GoBackground's: the writer must end for it to be waited for
	poll.Until(t, "the writer's intent held", func() bool { return intentHeld(s, "rw")(ctx) })
	return sync.OnceFunc(func() {
		cancel()
		<-gaveUp
	})
}

// readOverRedlock returns a Redlock over three memory nodes and a read lease on its "rw".
func readOverRedlock(t *testing.T) (*redlock.Store, core.Lease) {
	t.Helper()
	_, ss := nodes(core.SystemClock{}, 3)
	s := mustNew(t, ss)
	r, err := scenario.MustRWMutex(t, s, "rw").AcquireRead(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

// TestRWMutexOverRedlockWriterTimeoutNamesTheKey: a writer that gives up while another writer
// waits (holding the intent) reports ErrNotAcquired on the RWMutex's key, not on the intent's
// private key.
func TestRWMutexOverRedlockWriterTimeoutNamesTheKey(t *testing.T) {
	s, r := readOverRedlock(t)
	ctx := context.Background()
	defer r.Release(ctx)
	giveUp := waitingWriter(t, s)
	_, err := scenario.MustRWMutex(t, s, "rw", primitives.WithAcquireTimeout(50*time.Millisecond)).Acquire(ctx)
	if !errors.Is(err, core.ErrNotAcquired) || !strings.HasPrefix(err.Error(), `leasehold: acquire "rw": `) {
		t.Errorf("a writer's acquire timeout behind a waiting writer: %q, want ErrNotAcquired on key \"rw\"", err)
	}
	giveUp()
}

// A writer that took its intent and died (its intent is no longer refreshed) holds readers
// back only until the intent expires: a reader waiting behind it then reads, well within its
// acquire timeout, although the intent's expiry is announced on no key.
func TestRWMutexOverRedlockDeadWritersIntentExpires(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := redlocks(t, ss, 2)
	ctx := context.Background()
	// The dead writer: an intent of 300ms that nobody refreshes.
	res, err := s[0].Acquire(ctx, core.AcquireRequest{Key: "rw\x00writer", Holder: "dead", Permits: 1, Limit: 1, TTL: 300 * time.Millisecond})
	if err != nil || !res.Granted {
		t.Fatalf("intent: %+v %v", res, err)
	}
	rd := scenario.MustRWMutex(t, s[1], "rw", primitives.WithRetryInterval(20*time.Millisecond), primitives.WithAcquireTimeout(5*time.Second))
	begin := time.Now()
	l, err := rd.AcquireRead(ctx)
	if err != nil {
		t.Fatalf("reader behind a dead writer's intent: %v", err)
	}
	defer l.Release(ctx)
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("the reader took %v behind an intent of 300ms", took)
	}
}

// Two writers over Redlock with a node down: a writer and a reader never hold at once, and the
// terms of an Election's successive leaders grow, while the nodes' fences are out of step (one
// node wiped between rounds).
func TestRWMutexOverRedlockWipedNodeNoTwoHolders(t *testing.T) {
	ns, ss := nodes(core.SystemClock{}, 3)
	s := redlocks(t, ss, 2)
	ctx := context.Background()
	a := scenario.MustRWMutex(t, s[0], "rw", primitives.WithRetryInterval(time.Millisecond))
	b := scenario.MustRWMutex(t, s[1], "rw", primitives.WithRetryInterval(time.Millisecond))
	var lastFence uint64
	for i := range 20 {
		ns[i%3].wipe()
		w, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if w.Fence() <= lastFence {
			t.Fatalf("round %d: writer's fence %d after %d", i, w.Fence(), lastFence)
		}
		lastFence = w.Fence()
		if r, err := b.TryAcquireRead(ctx); err == nil {
			r.Release(ctx)
			t.Fatalf("round %d: a reader got in while the writer holds", i)
		}
		w.Release(ctx)
		r, err := b.AcquireRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if w, err := a.TryAcquire(ctx); err == nil {
			w.Release(ctx)
			t.Fatalf("round %d: a writer got in while a reader holds", i)
		}
		if r.Fence() <= lastFence {
			t.Fatalf("round %d: reader's fence %d after %d", i, r.Fence(), lastFence)
		}
		lastFence = r.Fence()
		r.Release(ctx)
	}
}
