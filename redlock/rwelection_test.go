package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// RWMutex and Election over Redlock: of memory nodes (which can fail, see node) and of real
// redis-servers. Redlock keeps no line, so an RWMutex's writer waits with its intent and no
// Inspect reports waiters; campaigners retry at their retry interval.
//
// The scenario helpers below are those of primitives/rwmutex_test.go and
// primitives/election_test.go, copied: test files cannot import each other across packages.

// goBackground runs f on a goroutine of its own, with a ctx that ends when t does, and waits
// for it then, so that a failed test leaves nothing behind to report after it ends.
func goBackground(t *testing.T, f func(ctx context.Context)) {
	var wg sync.WaitGroup
	wg.Go(func() { f(t.Context()) })
	t.Cleanup(wg.Wait)
}

func mustRW(t *testing.T, store core.Store, key string, opts ...primitives.Option) *primitives.RWMutex {
	t.Helper()
	rw, err := primitives.NewRWMutex(store, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

// rwStress has workers goroutines take rounds leases each on the RWMutexes in turn (each a view
// of one key, as separate processes would have), a write lease one time in four, held for hold.
// It fails t if a writer ever held with a reader or another writer, and returns the most readers
// that held at once.
func rwStress(t *testing.T, rws []*primitives.RWMutex, workers, rounds int, hold time.Duration) (peakReaders int) {
	t.Helper()
	ctx := context.Background()
	// A reader enters with one permit, a writer with all of them: any company of a writer
	// takes the count past the limit.
	all := conformance.NewOccupancy(primitives.MaxReaders)
	readers := conformance.NewOccupancy(0)
	var reads, writes atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		rw := rws[w%len(rws)]
		wg.Go(func() {
			for range rounds {
				write := rand.N(4) == 0
				acquire, permits := rw.AcquireRead, 1
				if write {
					acquire, permits = rw.Acquire, primitives.MaxReaders
				}
				l, err := acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if l.Permits() != permits {
					t.Errorf("lease of %d permits, want %d", l.Permits(), permits)
				}
				leave := all.Enter(permits)
				leaveR := func() {}
				if write {
					writes.Add(1)
				} else {
					reads.Add(1)
					leaveR = readers.Enter(1)
				}
				time.Sleep(hold)
				leaveR()
				leave()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if v := all.Violations(); len(v) > 0 {
		t.Errorf("a writer held with others %d times, first: %v", len(v), v[0])
	}
	t.Logf("%d reads, %d writes; at most %d readers at once", reads.Load(), writes.Load(), readers.Peak())
	return readers.Peak()
}

// writerNotStarved runs a stream of overlapping readers on rd — a new one every 5ms, each
// holding for 20ms, so that the key is read-held throughout — and, once it flows, a writer's
// Acquire on wr (whose acquire timeout is the bound: give wr one of a few seconds). The writer
// must get the lock while the stream goes on; waiting(ctx) says whether the writer has made
// its wait known (in the line, or by its intent), and every reader that began to acquire after
// that was seen must be granted after the writer (a higher fence). No writer may hold with a
// reader throughout.
func writerNotStarved(t *testing.T, rd, wr *primitives.RWMutex, waiting func(context.Context) bool) {
	t.Helper()
	ctx := context.Background()
	occ := conformance.NewOccupancy(primitives.MaxReaders)
	type read struct {
		late  bool // began after the writer was seen waiting
		fence uint64
	}
	var (
		mu       sync.Mutex
		reads    []read
		granted  atomic.Int64
		seen     atomic.Bool
		stop     = make(chan struct{})
		spawning sync.WaitGroup
	)
	spawning.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			late := seen.Load()
			spawning.Go(func() {
				l, err := rd.AcquireRead(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				granted.Add(1)
				mu.Lock()
				reads = append(reads, read{late, l.Fence()})
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				leave()
				l.Release(ctx)
			})
		}
	})
	halt := sync.OnceFunc(func() {
		close(stop)
		spawning.Wait()
	})
	defer halt()
	for deadline := time.Now().Add(10 * time.Second); granted.Load() < 10; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the readers' stream did not start within 10s")
		}
	}

	got := make(chan core.Lease, 1)
	begin := time.Now()
	goBackground(t, func(ctx context.Context) {
		l, err := wr.Acquire(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("the writer under a stream of readers: %v (after %v)", err, time.Since(begin))
		}
		got <- l
	})
	var l core.Lease
	for l == nil {
		select {
		case l = <-got:
			if l == nil {
				return
			}
		case <-time.After(time.Millisecond):
			if !seen.Load() && waiting(ctx) {
				seen.Store(true)
			}
		}
	}
	leave := occ.Enter(primitives.MaxReaders)
	t.Logf("the writer got the lock after %v, with %d reads granted so far", time.Since(begin), granted.Load())
	if !seen.Load() {
		t.Error("the writer was never seen waiting: the readers did not keep the key held")
	}
	// The stream goes on while the writer holds: those readers must wait for it.
	before := granted.Load()
	time.Sleep(30 * time.Millisecond)
	if n := granted.Load() - before; n != 0 {
		t.Errorf("%d reads granted while the writer held", n)
	}
	leave()
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
	// Readers come again after the writer.
	for deadline := time.Now().Add(10 * time.Second); granted.Load() < before+3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no reads granted within 10s of the writer's release")
		}
	}
	halt()
	late := 0
	for _, r := range reads {
		if r.late {
			late++
		}
		if r.late && r.fence < l.Fence() {
			t.Errorf("a reader that came after the writer waited was granted before it (fence %d < writer's %d)", r.fence, l.Fence())
		}
	}
	if late == 0 {
		t.Error("no reader began while the writer waited: the stream stopped")
	}
	if v := occ.Violations(); len(v) > 0 {
		t.Errorf("a writer held with readers: %v", v)
	}
}

// lineWaiting reports whether a writer waits in rw's line.
func lineWaiting(rw *primitives.RWMutex) func(context.Context) bool {
	return func(ctx context.Context) bool {
		st, err := rw.Inspect(ctx)
		return err == nil && slices.ContainsFunc(st.Waiters, func(w primitives.RWWaiter) bool { return w.Write })
	}
}

// rwLineIsFIFO: on a store with a line, two readers queued behind a writer, then a writer, then
// a reader: Inspect lists them in that order with their Write flags, and they are granted in
// that order — both readers together, then the writer once both leave, then the last reader.
// newRW makes an RWMutex on the key whose leases carry value.
func rwLineIsFIFO(t *testing.T, newRW func(value string) *primitives.RWMutex) {
	t.Helper()
	ctx := context.Background()
	insp := newRW("inspect")
	waiters := func(n int) primitives.RWStatus {
		t.Helper()
		var st primitives.RWStatus
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			var err error
			if st, err = insp.Inspect(ctx); err != nil {
				t.Fatal(err)
			}
			if len(st.Waiters) == n {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters in line after 10s, want %d: %+v", len(st.Waiters), n, st)
			}
		}
	}
	start := func(value string, write bool) <-chan core.Lease {
		rw := newRW(value)
		got := make(chan core.Lease, 1)
		goBackground(t, func(ctx context.Context) {
			acquire := rw.AcquireRead
			if write {
				acquire = rw.Acquire
			}
			l, err := acquire(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", value, err)
			}
			got <- l
		})
		return got
	}
	take := func(c <-chan core.Lease, who string) core.Lease {
		t.Helper()
		select {
		case l := <-c:
			if l == nil {
				t.FailNow()
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not granted within 10s", who)
			return nil
		}
	}

	w0, err := newRW("w0").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r1 := start("r1", false)
	waiters(1)
	r2 := start("r2", false)
	waiters(2)
	w1 := start("w1", true)
	waiters(3)
	r3 := start("r3", false)
	st := waiters(4)
	var order []primitives.RWWaiter
	for _, w := range st.Waiters {
		order = append(order, primitives.RWWaiter{Value: w.Value, Write: w.Write})
	}
	want := []primitives.RWWaiter{{Value: "r1"}, {Value: "r2"}, {Value: "w1", Write: true}, {Value: "r3"}}
	if !slices.Equal(order, want) {
		t.Fatalf("the line: %+v, want %+v", order, want)
	}
	if !st.Writing || st.Writer.Value != "w0" || st.Writer.Holder != w0.Holder() || len(st.Readers) != 0 {
		t.Fatalf("while w0 writes: %+v", st)
	}

	if err := w0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l1, l2 := take(r1, "r1"), take(r2, "r2")
	st = waiters(2)
	if st.Writing || len(st.Readers) != 2 || st.Waiters[0].Value != "w1" || st.Waiters[1].Value != "r3" {
		t.Fatalf("after w0's release: %+v; want r1 and r2 reading, w1 then r3 waiting", st)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// r3 may not pass w1 although r2 alone reads.
	if st, err := insp.Inspect(ctx); err != nil || len(st.Readers) != 1 || st.Writing {
		t.Fatalf("after r1's release: %+v, %v; want r2 alone reading", st, err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lw := take(w1, "w1")
	if lw.Fence() <= max(l1.Fence(), l2.Fence()) {
		t.Errorf("w1's fence %d not above the readers' %d, %d", lw.Fence(), l1.Fence(), l2.Fence())
	}
	st = waiters(1)
	if !st.Writing || st.Writer.Holder != lw.Holder() || st.Writer.Value != "w1" || st.Waiters[0].Value != "r3" {
		t.Fatalf("after the readers' release: %+v; want w1 writing, r3 waiting", st)
	}
	if err := lw.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3 := take(r3, "r3")
	if l3.Fence() <= lw.Fence() {
		t.Errorf("r3's fence %d not above w1's %d", l3.Fence(), lw.Fence())
	}
	l3.Release(ctx)
}

// rwInspect: RWStatus reports readers (ordered by fence, with holder, permits and value), then
// a waiting writer (Write set), then the writer holding.
func rwInspect(t *testing.T, newRW func(value string) *primitives.RWMutex, line bool) {
	t.Helper()
	ctx := context.Background()
	ra, rb := newRW("ra"), newRW("rb")
	la, err := ra.AcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := rb.AcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ra.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Writing || st.Writer != (core.LeaseInfo{}) || len(st.Waiters) != 0 || len(st.Readers) != 2 {
		t.Fatalf("two readers: %+v", st)
	}
	for i, l := range []core.Lease{la, lb} {
		r := st.Readers[i]
		if r.Holder != l.Holder() || r.Fence != l.Fence() || r.Permits != 1 || r.Value != l.Value() || r.TTL <= 0 {
			t.Errorf("Readers[%d] = %+v, want the lease %s fence %d value %q", i, r, l.Holder(), l.Fence(), l.Value())
		}
	}
	if la.Value() != "ra" || lb.Value() != "rb" {
		t.Errorf("read leases' values %q, %q; want ra, rb", la.Value(), lb.Value())
	}

	wr := newRW("w")
	got := make(chan core.Lease, 1)
	goBackground(t, func(ctx context.Context) {
		l, err := wr.Acquire(ctx)
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- l
	})
	var waiter primitives.RWWaiter
	if line {
		for deadline := time.Now().Add(10 * time.Second); len(st.Waiters) == 0; time.Sleep(2 * time.Millisecond) {
			if st, err = ra.Inspect(ctx); err != nil || time.Now().After(deadline) {
				t.Fatalf("no writer in line within 10s: %+v, %v", st, err)
			}
		}
		waiter = st.Waiters[0]
		if len(st.Waiters) != 1 || !waiter.Write || waiter.Value != "w" || waiter.Holder == "" || len(st.Readers) != 2 || st.Writing {
			t.Fatalf("a writer waiting for two readers: %+v", st)
		}
	}
	la.Release(ctx)
	lb.Release(ctx)
	var lw core.Lease
	select {
	case lw = <-got:
		if lw == nil {
			t.FailNow()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer was not granted within 10s of the readers' release")
	}
	defer lw.Release(ctx)
	if line && lw.Holder() != waiter.Holder {
		t.Errorf("the writer holds as %s, waited as %s", lw.Holder(), waiter.Holder)
	}
	st, err = ra.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := core.LeaseInfo{Holder: lw.Holder(), Permits: primitives.MaxReaders, Fence: lw.Fence(), Value: "w"}
	ttl := st.Writer.TTL
	st.Writer.TTL = 0
	if !st.Writing || st.Writer != want || ttl <= 0 || len(st.Readers) != 0 || len(st.Waiters) != 0 {
		t.Fatalf("the writer holding: %+v, want Writer %+v", st, want)
	}
}

// waitingWriterHoldsBackTries: while a reader holds and a writer waits (waiting says so),
// TryAcquireRead and a second writer's TryAcquire are refused; once the waiting writer gives up
// (its ctx ends), a reader gets in again. newRW makes an RWMutex on the key.
func waitingWriterHoldsBackTries(t *testing.T, newRW func() *primitives.RWMutex, waiting func(context.Context) bool) {
	t.Helper()
	ctx := context.Background()
	r1, err := newRW().AcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gaveUp := make(chan error, 1)
	wr := newRW()
	goBackground(t, func(context.Context) {
		l, err := wr.Acquire(wctx)
		if err == nil {
			l.Release(ctx)
		}
		gaveUp <- err
	})
	for deadline := time.Now().Add(10 * time.Second); !waiting(ctx); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer was not seen waiting within 10s")
		}
	}
	try := newRW()
	if l, err := try.TryAcquireRead(ctx); !errors.Is(err, core.ErrNotAcquired) {
		if l != nil {
			l.Release(ctx)
		}
		t.Errorf("TryAcquireRead while a writer waits: %v, want ErrNotAcquired", err)
	}
	if l, err := try.TryAcquire(ctx); !errors.Is(err, core.ErrNotAcquired) {
		if l != nil {
			l.Release(ctx)
		}
		t.Errorf("TryAcquire while a reader holds and a writer waits: %v, want ErrNotAcquired", err)
	}
	cancel()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiting writer, its ctx canceled: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting writer did not give up within 10s of its ctx's end")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l, err := try.TryAcquireRead(ctx)
		if err == nil {
			l.Release(ctx)
			break
		}
		if !errors.Is(err, core.ErrNotAcquired) || time.Now().After(deadline) {
			t.Fatalf("TryAcquireRead after the writer gave up: %v", err)
		}
	}
}
func mustElection(t *testing.T, store core.Store, key string, opts ...primitives.Option) *primitives.Election {
	t.Helper()
	el, err := primitives.NewElection(store, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return el
}

// oneLeaderAtATime has each election (a campaigner's view of the key, as separate processes
// would have) campaign rounds times, hold leadership briefly and resign. No two lead at once,
// each lease carries its campaign's value, and terms strictly increase in the order granted.
func oneLeaderAtATime(t *testing.T, els []*primitives.Election, rounds int) {
	t.Helper()
	ctx := context.Background()
	occ := conformance.NewOccupancy(1)
	var last atomic.Uint64
	var terms atomic.Int64
	var wg sync.WaitGroup
	for i, el := range els {
		wg.Go(func() {
			for r := range rounds {
				value := fmt.Sprintf("c%d-%d", i, r)
				l, err := el.Campaign(ctx, value)
				if err != nil {
					t.Error(err)
					return
				}
				leave := occ.Enter(1)
				if prev := last.Swap(l.Fence()); l.Fence() <= prev {
					t.Errorf("term %d granted after term %d", l.Fence(), prev)
				}
				terms.Add(1)
				if l.Value() != value {
					t.Errorf("the leader's lease has value %q, campaigned with %q", l.Value(), value)
				}
				time.Sleep(200 * time.Microsecond)
				leave()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if occ.Peak() != 1 || terms.Load() != int64(len(els)*rounds) {
		t.Errorf("%d leaders at once, %d terms; want 1 and %d", occ.Peak(), terms.Load(), len(els)*rounds)
	}
}

// resignHandsOver: b campaigns while a leads, and is in line (inLine says so); a resigns, and
// b leads at once. b's election must have a retry interval of an hour and the TTL be long, so
// that only the handover can wake b within the 10s allowed.
func resignHandsOver(t *testing.T, a, b *primitives.Election, inLine func() bool) {
	t.Helper()
	ctx := context.Background()
	la, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan core.Lease, 1)
	goBackground(t, func(ctx context.Context) {
		lb, err := b.Campaign(ctx, "b")
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- lb
	})
	for deadline := time.Now().Add(10 * time.Second); !inLine(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second campaigner is not in line after 10s")
		}
	}
	resigned := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			t.FailNow()
		}
		t.Logf("handed over %v after the resignation", time.Since(resigned))
		if lb.Fence() <= la.Fence() || lb.Value() != "b" {
			t.Errorf("the successor: term %d value %q; want a term above %d, value b", lb.Fence(), lb.Value(), la.Fence())
		}
		lb.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting campaigner did not lead within 10s of the resignation (retry interval 1h)")
	}
}

// observer reads an Observe channel, failing t when nothing comes within 10s.
type observer struct {
	t  *testing.T
	ch <-chan primitives.Leader
}

func (o observer) next() primitives.Leader {
	o.t.Helper()
	select {
	case ld, ok := <-o.ch:
		if !ok {
			o.t.Fatal("the Observe channel closed")
		}
		return ld
	case <-time.After(10 * time.Second):
		o.t.Fatal("no leader change observed within 10s")
		return primitives.Leader{}
	}
}

// expect reads the next change and fails t unless it is want.
func (o observer) expect(want primitives.Leader) {
	o.t.Helper()
	if ld := o.next(); ld != want {
		o.t.Fatalf("observed %+v, want %+v", ld, want)
	}
}

func leaderOf(l core.Lease) primitives.Leader {
	return primitives.Leader{Value: l.Value(), Holder: l.Holder(), Fence: l.Fence()}
}

// observeSeesEveryChange: leaders a, b, c in turn, each resigning before the next campaigns, on
// els[i]; obs observes: its stream is exactly none, a, none, b, none, c, none, each value and
// term the leader's. Give obs a retry interval of an hour: then only the store's
// announcements can explain a prompt update.
func observeSeesEveryChange(t *testing.T, els []*primitives.Election, obs *primitives.Election) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := observer{t, obs.Observe(ctx)}
	o.expect(primitives.Leader{})
	var last uint64
	for i, v := range []string{"a", "b", "c"} {
		l, err := els[i%len(els)].Campaign(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		o.expect(leaderOf(l))
		if l.Fence() <= last {
			t.Errorf("term %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		o.expect(primitives.Leader{})
	}
}

// observeSeesHandovers: on a store with a line, b waits while a leads and c while b does; each
// resigns: the observer sees a, b, c and then none, with no gap between them.
func observeSeesHandovers(t *testing.T, els []*primitives.Election, obs *primitives.Election, waiters func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := observer{t, obs.Observe(ctx)}
	o.expect(primitives.Leader{})
	l, err := els[0].Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	o.expect(leaderOf(l))
	for i, v := range []string{"b", "c"} {
		got := make(chan core.Lease, 1)
		goBackground(t, func(ctx context.Context) {
			next, err := els[(i+1)%len(els)].Campaign(ctx, v)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
			}
			got <- next
		})
		for deadline := time.Now().Add(10 * time.Second); waiters() != 1; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s is not in line after 10s", v)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var next core.Lease
		select {
		case next = <-got:
			if next == nil {
				t.FailNow()
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not lead within 10s of the resignation", v)
		}
		o.expect(leaderOf(next))
		if next.Fence() <= l.Fence() {
			t.Errorf("term %d after %d", next.Fence(), l.Fence())
		}
		l = next
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	o.expect(primitives.Leader{})
}

// observeSeesDeadLeaderGone: a leader whose lease is not refreshed (el: WithoutRefresh and a
// short TTL) is seen gone by obs once its lease expires, and not before its deadline. The
// observer starts once the leader leads, and has a retry interval of an hour: only the leader's
// TTL, read with it, can wake it.
func observeSeesDeadLeaderGone(t *testing.T, el, obs *primitives.Election) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := el.Campaign(ctx, "mortal")
	if err != nil {
		t.Fatal(err)
	}
	o := observer{t, obs.Observe(ctx)}
	o.expect(leaderOf(l))
	o.expect(primitives.Leader{})
	if now := time.Now(); now.Before(l.Deadline()) {
		t.Errorf("the leader was seen gone %v before its lease's deadline", l.Deadline().Sub(now))
	}
	l.Release(ctx)
}

// observeEndsWithCtx: the channel closes once ctx ends, whether or not the observer was
// reading (goleak, in TestMain, checks that its goroutine ended).
func observeEndsWithCtx(t *testing.T, obs *primitives.Election) {
	t.Helper()
	for _, read := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		ch := obs.Observe(ctx)
		if read {
			observer{t, ch}.expect(primitives.Leader{})
		}
		cancel()
		timeout := time.After(10 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break drain
				}
			case <-timeout:
				t.Fatalf("the Observe channel (read: %v) not closed within 10s of its ctx's end", read)
			}
		}
	}
}

// leaderCarriesTheValue: the leader's lease carries its campaign's value, and Leader reports
// it with the holder and term; with no leader, ok is false.
func leaderCarriesTheValue(t *testing.T, el, other *primitives.Election) {
	t.Helper()
	ctx := context.Background()
	if ld, ok, err := other.Leader(ctx); err != nil || ok || ld != (primitives.Leader{}) {
		t.Fatalf("Leader before any campaign: %+v, %v, %v; want none", ld, ok, err)
	}
	l, err := el.Campaign(ctx, "host-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	if l.Value() != "host-a:8080" || l.Permits() != 1 || l.Key() != el.Key() {
		t.Errorf("the leader's lease: value %q, %d permits, key %q", l.Value(), l.Permits(), l.Key())
	}
	if ld, ok, err := other.Leader(ctx); err != nil || !ok || ld != leaderOf(l) {
		t.Errorf("Leader = %+v, %v, %v; want %+v", ld, ok, err, leaderOf(l))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ld, ok, err := other.Leader(ctx); err != nil || ok || ld != (primitives.Leader{}) {
		t.Errorf("Leader after the resignation: %+v, %v, %v; want none", ld, ok, err)
	}
}

// lineLength returns how many wait in key's line on s.
func lineLength(s core.Store, key string) func() int {
	return func() int {
		snap, err := s.Inspect(context.Background(), key)
		if err != nil {
			return -1
		}
		return len(snap.Waiters)
	}
}

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
		rws = append(rws, mustRW(t, s, "rw", primitives.WithRetryInterval(time.Millisecond)))
	}
	if peak := rwStress(t, rws, 8, 30, 500*time.Microsecond); peak < 2 {
		t.Errorf("at most %d reader at once: readers did not share the key", peak)
	}
}

func TestRWMutexOverRedlockRedisServersExcludesAndShares(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartServer(t).Addr)
	}
	h := redisHarness{addrs}
	var rws []*primitives.RWMutex
	for range 3 {
		rws = append(rws, mustRW(t, h.NewStore(t), "rw", primitives.WithRetryInterval(time.Millisecond), primitives.WithAcquireTimeout(time.Minute)))
	}
	if peak := rwStress(t, rws, 8, 15, time.Millisecond); peak < 2 {
		t.Errorf("at most %d reader at once: readers did not share the key", peak)
	}
}

func TestRWMutexOverRedlockWriterNotStarved(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := redlocks(t, ss, 2)
	rd := mustRW(t, s[0], "rw")
	wr := mustRW(t, s[1], "rw", primitives.WithAcquireTimeout(5*time.Second))
	writerNotStarved(t, rd, wr, intentHeld(s[0], "rw"))
}

func TestRWMutexOverRedlockRedisServersWriterNotStarved(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartServer(t).Addr)
	}
	h := redisHarness{addrs}
	rs, ws := h.NewStore(t), h.NewStore(t)
	rd := mustRW(t, rs, "rw")
	wr := mustRW(t, ws, "rw", primitives.WithAcquireTimeout(5*time.Second))
	writerNotStarved(t, rd, wr, intentHeld(rs, "rw"))
}

// TestRWMutexOverRedlockWithANodeDown: with one node of three down, a writer acquires and
// excludes readers and writers; once it leaves, readers acquire together and exclude writers;
// and a stress run keeps exclusion with the node down.
func TestRWMutexOverRedlockWithANodeDown(t *testing.T) {
	ns, ss := nodes(core.SystemClock{}, 3)
	ns[1].set(true, 0)
	ctx := context.Background()
	s := redlocks(t, ss, 3)
	a, b, c := mustRW(t, s[0], "rw"), mustRW(t, s[1], "rw"), mustRW(t, s[2], "rw")
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
		rws = append(rws, mustRW(t, st, "stress", primitives.WithRetryInterval(time.Millisecond)))
	}
	rwStress(t, rws, 6, 20, 500*time.Microsecond)
}

func TestRWMutexOverRedlockWaitingWriterHoldsBackTries(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := mustNew(t, ss)
	waitingWriterHoldsBackTries(t, func() *primitives.RWMutex { return mustRW(t, s, "rw") }, intentHeld(s, "rw"))
}

// TestElectionOverRedlockObserveWithANodeDown: with one node of three down its watch fails, so
// Observe's watch is unreliable and it reads at its interval as well: it still sees a leader
// come and go.
func TestElectionOverRedlockObserveWithANodeDown(t *testing.T) {
	ns, ss := nodes(core.SystemClock{}, 3)
	ns[2].set(true, 0)
	els := elections(t, ss, 2)
	observeSeesEveryChange(t, els[:1], els[1])
}

func TestRWMutexOverRedlockInspect(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := mustNew(t, ss)
	rwInspect(t, func(v string) *primitives.RWMutex { return mustRW(t, s, "rw", primitives.WithValue(v)) }, false)
}

// elections returns n elections on key over n Redlock Stores of the same nodes.
func elections(t *testing.T, ss []core.Store, n int, opts ...primitives.Option) []*primitives.Election {
	var els []*primitives.Election
	for _, s := range redlocks(t, ss, n) {
		els = append(els, mustElection(t, s, "lead", opts...))
	}
	return els
}

func TestElectionOverRedlockOneLeaderAtATime(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	oneLeaderAtATime(t, elections(t, ss, 4, primitives.WithRetryInterval(time.Millisecond)), 15)
}

func TestElectionOverRedlockRedisServersOneLeaderAtATime(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartServer(t).Addr)
	}
	h := redisHarness{addrs}
	var els []*primitives.Election
	for range 3 {
		els = append(els, mustElection(t, h.NewStore(t), "lead", primitives.WithRetryInterval(time.Millisecond)))
	}
	oneLeaderAtATime(t, els, 10)
}

func TestElectionOverRedlockObserveSeesEveryChange(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	els := elections(t, ss, 2)
	obs := elections(t, ss, 1, primitives.WithRetryInterval(time.Hour))[0]
	observeSeesEveryChange(t, els, obs)
}

func TestElectionOverRedlockObserveSeesDeadLeaderGone(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	el := elections(t, ss, 1, primitives.WithTTL(200*time.Millisecond), primitives.WithoutRefresh())[0]
	obs := elections(t, ss, 1, primitives.WithRetryInterval(time.Hour))[0]
	observeSeesDeadLeaderGone(t, el, obs)
}

func TestElectionOverRedlockObserveEndsWithCtx(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	observeEndsWithCtx(t, elections(t, ss, 1)[0])
}

func TestElectionOverRedlockLeaderCarriesTheValue(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	els := elections(t, ss, 2)
	leaderCarriesTheValue(t, els[0], els[1])
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
	rw := mustRW(t, rl, "rw", primitives.WithAcquireTimeout(5*time.Second))
	w, err := rw.Acquire(ctx)
	if err != nil {
		t.Fatalf("writer with 2 of 3 nodes up: %v", err)
	}
	got := make(chan core.Lease, 1)
	goBackground(t, func(ctx context.Context) {
		l, err := rw.AcquireRead(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("the reader waiting for the writer: %v", err)
		}
		got <- l
	})
	for deadline := time.Now().Add(10 * time.Second); rl.n.Load() < 2; time.Sleep(time.Millisecond) {
		select {
		case <-got:
			t.Fatal("the reader's Acquire returned while the writer held")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader was not refused twice within 10s")
		}
	}
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
	_, ss := nodes(core.SystemClock{}, 3)
	s := mustNew(t, ss)
	ctx := context.Background()
	r, err := mustRW(t, s, "rw").AcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The waiting writer retries when the reader's lease would expire (10s), or at its retry
	// interval (1h): not within this test.
	waiting := mustRW(t, s, "rw", primitives.WithRetryInterval(time.Hour))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gaveUp := make(chan error, 1)
	goBackground(t, func(context.Context) {
		l, err := waiting.Acquire(wctx)
		if err == nil {
			l.Release(ctx)
		}
		gaveUp <- err
	})
	pollUntilT(t, func() bool { return intentHeld(s, "rw")(ctx) })
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := mustRW(t, s, "rw")
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
	cancel()
	<-gaveUp
}

// pollUntilT polls cond every millisecond until it holds, and fails t if it does not within 10s.
func pollUntilT(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

// TestRWMutexOverRedlockWriterTimeoutNamesTheKey: a writer that gives up while another writer
// waits (holding the intent) reports ErrNotAcquired on the RWMutex's key, not on the intent's
// private key.
func TestRWMutexOverRedlockWriterTimeoutNamesTheKey(t *testing.T) {
	_, ss := nodes(core.SystemClock{}, 3)
	s := mustNew(t, ss)
	ctx := context.Background()
	r, err := mustRW(t, s, "rw").AcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gaveUp := make(chan error, 1)
	goBackground(t, func(context.Context) {
		l, err := mustRW(t, s, "rw").Acquire(wctx)
		if err == nil {
			l.Release(ctx)
		}
		gaveUp <- err
	})
	pollUntilT(t, func() bool { return intentHeld(s, "rw")(ctx) })
	_, err = mustRW(t, s, "rw", primitives.WithAcquireTimeout(50*time.Millisecond)).Acquire(ctx)
	if !errors.Is(err, core.ErrNotAcquired) || !strings.HasPrefix(err.Error(), `leasehold: acquire "rw": `) {
		t.Errorf("a writer's acquire timeout behind a waiting writer: %q, want ErrNotAcquired on key \"rw\"", err)
	}
	cancel()
	<-gaveUp
}
