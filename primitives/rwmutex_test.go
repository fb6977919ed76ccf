package primitives_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The RWMutex's behaviours on the memory store, a store with a line. The same scenarios run on
// Redlock (redlock/rwelection_test.go) and on both Redis drivers
// (backend/internal/rediscore/rwelection_test.go).

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

func TestRWMutexExcludesWritersAndSharesReaders(t *testing.T) {
	s := memory.New()
	var rws []*primitives.RWMutex
	for range 3 {
		rws = append(rws, mustRW(t, s, "rw", primitives.WithRetryInterval(time.Millisecond)))
	}
	if peak := rwStress(t, rws, 8, 40, 500*time.Microsecond); peak < 2 {
		t.Errorf("at most %d reader at once: readers did not share the key", peak)
	}
}

func TestRWMutexWriterNotStarvedByReaders(t *testing.T) {
	s := memory.New()
	rd := mustRW(t, s, "rw")
	wr := mustRW(t, s, "rw", primitives.WithAcquireTimeout(5*time.Second))
	writerNotStarved(t, rd, wr, lineWaiting(rd))
}

func TestRWMutexLineIsFIFO(t *testing.T) {
	s := memory.New()
	rwLineIsFIFO(t, func(v string) *primitives.RWMutex {
		return mustRW(t, s, "rw", primitives.WithValue(v), primitives.WithRetryInterval(time.Hour))
	})
}

func TestRWMutexInspect(t *testing.T) {
	s := memory.New()
	rwInspect(t, func(v string) *primitives.RWMutex { return mustRW(t, s, "rw", primitives.WithValue(v)) }, true)
}

func TestRWMutexWaitingWriterHoldsBackTries(t *testing.T) {
	s := memory.New()
	waitingWriterHoldsBackTries(t, func() *primitives.RWMutex { return mustRW(t, s, "rw") }, lineWaiting(mustRW(t, s, "rw")))
}
