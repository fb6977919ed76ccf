package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// RWLineIsFIFO proves that a store's line is first in, first out for readers and writers. On a
// store with a line, two readers queued behind a writer, then a writer, then
// a reader: Inspect lists them in that order with their Write flags, and they are granted in
// that order — both readers together, then the writer once both leave, then the last reader.
// newRW makes an RWMutex on the key whose leases carry value.
func RWLineIsFIFO(t testing.TB, newRW func(value string) *primitives.RWMutex) {
	t.Helper()
	ctx := context.Background()
	q := &rwLine{t: t, newRW: newRW, insp: newRW("inspect")}
	w0, err := newRW("w0").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r1, r2, w1, r3 := q.queueBehind(w0)
	if err := w0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l1, l2 := q.readTogether(r1, r2)
	lw := q.take(w1, "w1")
	if lw.Fence() <= max(l1.Fence(), l2.Fence()) {
		t.Errorf("w1's fence %d not above the readers' %d, %d", lw.Fence(), l1.Fence(), l2.Fence())
	}
	st := q.waiters(1)
	if !st.Writing || st.Writer.Holder != lw.Holder() || st.Writer.Value != "w1" || st.Waiters[0].Value != "r3" {
		t.Fatalf("after the readers' release: %+v; want w1 writing, r3 waiting", st)
	}
	if err := lw.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3 := q.take(r3, "r3")
	if l3.Fence() <= lw.Fence() {
		t.Errorf("r3's fence %d not above w1's %d", l3.Fence(), lw.Fence())
	}
	l3.Release(ctx)
}

// rwLine is RWLineIsFIFO's key: RWMutexes on it that wait in its line, and one that inspects it.
type rwLine struct {
	t     testing.TB
	newRW func(value string) *primitives.RWMutex
	insp  *primitives.RWMutex
}

// waiters waits until n wait in the line, and returns what Inspect reports then.
func (q *rwLine) waiters(n int) primitives.RWStatus {
	q.t.Helper()
	return poll.For(q.t, fmt.Sprintf("%d waiters in line", n), func() (primitives.RWStatus, bool) {
		st, err := q.insp.Inspect(context.Background())
		if err != nil {
			q.t.Fatal(err)
		}
		return st, len(st.Waiters) == n
	})
}

// start starts a reader (or a writer) whose lease carries value, and returns where its lease
// comes: nil if it failed.
func (q *rwLine) start(value string, write bool) <-chan core.Lease {
	rw := q.newRW(value)
	got := make(chan core.Lease, 1)
	GoBackground(q.t, func(ctx context.Context) {
		acquire := rw.AcquireRead
		if write {
			acquire = rw.Acquire
		}
		l, err := acquire(ctx)
		if err != nil && ctx.Err() == nil {
			q.t.Errorf("%s: %v", value, err)
		}
		got <- l
	})
	return got
}

// take returns the lease that comes on c, and fails the test at once if none comes within 10s.
func (q *rwLine) take(c <-chan core.Lease, who string) core.Lease {
	q.t.Helper()
	select {
	case l := <-c:
		if l == nil {
			q.t.FailNow()
		}
		return l
	case <-time.After(10 * time.Second):
		q.t.Fatalf("%s not granted within 10s", who)
		return nil
	}
}

// queueBehind queues two readers, a writer and a reader, in that order, behind the writer w0,
// and fails the test at once unless Inspect lists them so, with w0 writing.
func (q *rwLine) queueBehind(w0 core.Lease) (r1, r2, w1, r3 <-chan core.Lease) {
	t := q.t
	t.Helper()
	r1 = q.start("r1", false)
	q.waiters(1)
	r2 = q.start("r2", false)
	q.waiters(2)
	w1 = q.start("w1", true)
	q.waiters(3)
	r3 = q.start("r3", false)
	st := q.waiters(4)
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
	return r1, r2, w1, r3
}

// readTogether takes the two readers' leases, granted together, checks that the writer and the
// last reader still wait behind them (the last reader not passing the writer while one reader
// alone reads), and releases both.
func (q *rwLine) readTogether(r1, r2 <-chan core.Lease) (l1, l2 core.Lease) {
	t, ctx := q.t, context.Background()
	t.Helper()
	l1, l2 = q.take(r1, "r1"), q.take(r2, "r2")
	st := q.waiters(2)
	if st.Writing || len(st.Readers) != 2 || st.Waiters[0].Value != "w1" || st.Waiters[1].Value != "r3" {
		t.Fatalf("after w0's release: %+v; want r1 and r2 reading, w1 then r3 waiting", st)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// r3 may not pass w1 although r2 alone reads.
	if st, err := q.insp.Inspect(ctx); err != nil || len(st.Readers) != 1 || st.Writing {
		t.Fatalf("after r1's release: %+v, %v; want r2 alone reading", st, err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return l1, l2
}

// RWInspect proves what RWMutex.Inspect reports: readers (ordered by fence, with holder, permits
// and value), then a waiting writer (Write set; checked only if line, a store with a line), then
// the writer holding. newRW makes an RWMutex on the key whose leases carry value.
func RWInspect(t testing.TB, newRW func(value string) *primitives.RWMutex, line bool) {
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
	GoBackground(t, func(ctx context.Context) {
		l, err := wr.Acquire(ctx)
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- l
	})
	var waiter primitives.RWWaiter
	if line {
		st = poll.For(t, "a writer in line", func() (primitives.RWStatus, bool) {
			st, err := ra.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st, len(st.Waiters) > 0
		})
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

// WaitingWriterHoldsBackTries proves that a waiting writer holds back new tries: while a reader holds and a writer waits (waiting says so),
// TryAcquireRead and a second writer's TryAcquire are refused; once the waiting writer gives up
// (its ctx ends), a reader gets in again. newRW makes an RWMutex on the key.
func WaitingWriterHoldsBackTries(t testing.TB, newRW func() *primitives.RWMutex, waiting func(context.Context) bool) {
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
	GoBackground(t, func(context.Context) {
		l, err := wr.Acquire(wctx)
		if err == nil {
			l.Release(ctx)
		}
		gaveUp <- err
	})
	poll.Until(t, "the writer seen waiting", func() bool { return waiting(ctx) })
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
	poll.Until(t, "TryAcquireRead to succeed after the writer gave up", func() bool {
		l, err := try.TryAcquireRead(ctx)
		if err == nil {
			l.Release(ctx)
			return true
		}
		if !errors.Is(err, core.ErrNotAcquired) {
			t.Fatalf("TryAcquireRead after the writer gave up: %v", err)
		}
		return false
	})
}
