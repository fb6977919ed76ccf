package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// DeadlockBound is how long MultiLocksNeverDeadlock lets a round wait for its keys before it
// calls the wait a deadlock: far more than a loaded machine's stalls, far less than forever.
const DeadlockBound = time.Minute

// MultiLocksNeverDeadlock proves that MultiLocks naming overlapping keys in different orders
// neither deadlock nor let two hold a key at once. Each of mls (give four, over {a,b}, {b,a},
// {c,b} and {a,c}, each on a Store of its own, with an acquire timeout of DeadlockBound or more)
// takes its keys rounds times, holds them for a millisecond and releases them, all at once. It
// fails t if a key has two holders at once, a key's fences do not strictly increase in the order
// granted, a MultiLease is lost, or a round is not granted within DeadlockBound (a deadlock, which
// it reports with what each MultiLock was doing); then each MultiLock's TryAcquire must get all
// its keys, as nothing is left held.
func MultiLocksNeverDeadlock(t testing.TB, mls []*primitives.MultiLock, rounds int) {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(context.Background(), DeadlockBound, errDeadlock)
	defer cancel()
	d := newDeadlockRun(t, mls)
	var wg sync.WaitGroup
	for i := range mls {
		d.set(i, "starting")
		wg.Go(func() { d.run(ctx, i, rounds) })
	}
	d.wait(&wg)
	for k, o := range d.occ {
		if v := o.Violations(); len(v) > 0 {
			t.Errorf("key %q had two holders at once %d times, first: %v", k, len(v), v[0])
		}
	}
	t.Logf("%d rounds granted of %d", d.granted.Load(), len(mls)*rounds)
	if t.Failed() {
		return
	}
	for _, ml := range mls {
		var ms *primitives.MultiLease
		poll.For(t, fmt.Sprintf("MultiLock %v's TryAcquire granted after the rounds", ml.Keys()), func() (err error, ok bool) {
			ms, err = ml.TryAcquire(context.Background())
			return err, err == nil
		})
		if err := ms.Release(context.Background()); err != nil {
			t.Errorf("MultiLock %v: Release after the rounds: %v", ml.Keys(), err)
		}
	}
}

// deadlockRun is one run of MultiLocksNeverDeadlock: who holds each key, the fence each key
// granted last, and what each MultiLock is doing, for the report of a deadlock.
type deadlockRun struct {
	t       testing.TB
	mls     []*primitives.MultiLock
	occ     map[string]*conformance.Occupancy
	last    map[string]*atomic.Uint64 // each key's fence granted last
	doing   []atomic.Pointer[string]
	granted atomic.Int64
	first   sync.Once // the first failure says what every MultiLock was doing then

	mu   sync.Mutex
	over bool // the test gave up waiting for a round that ignores its ctx: report no more
}

func newDeadlockRun(t testing.TB, mls []*primitives.MultiLock) *deadlockRun {
	d := &deadlockRun{t: t, mls: mls, occ: map[string]*conformance.Occupancy{}, last: map[string]*atomic.Uint64{},
		doing: make([]atomic.Pointer[string], len(mls))}
	for _, ml := range mls {
		for _, k := range ml.Keys() {
			if d.occ[k] == nil {
				d.occ[k], d.last[k] = conformance.NewOccupancy(1), new(atomic.Uint64)
			}
		}
	}
	return d
}

// set records what the i-th MultiLock is doing.
func (d *deadlockRun) set(i int, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	d.doing[i].Store(&s)
}

// report fails the test, unless it has given up waiting for the rounds.
func (d *deadlockRun) report(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.over {
		d.t.Errorf(format, args...)
	}
}

// others says what each MultiLock is doing.
func (d *deadlockRun) others() string {
	var b strings.Builder
	for i, ml := range d.mls {
		fmt.Fprintf(&b, "\n\t%v: %s", ml.Keys(), *d.doing[i].Load())
	}
	return b.String()
}

// run makes the i-th MultiLock's rounds, stopping at its first failure.
func (d *deadlockRun) run(ctx context.Context, i, rounds int) {
	ml := d.mls[i]
	for r := range rounds {
		d.set(i, "waiting in round %d", r+1)
		asked := time.Now()
		ms, err := ml.Acquire(ctx)
		if err != nil {
			why := ""
			if context.Cause(ctx) == errDeadlock || errors.Is(err, primitives.ErrNotAcquired) {
				why = fmt.Sprintf("not granted in %v, a deadlock?: ", time.Since(asked).Round(time.Millisecond))
			}
			state := ""
			d.first.Do(func() { state = "; each MultiLock then:" + d.others() })
			d.set(i, "failed in round %d", r+1)
			d.report("MultiLock %v, round %d of %d: %s%v%s", ml.Keys(), r+1, rounds, why, err, state)
			return
		}
		d.set(i, "holding in round %d", r+1)
		d.granted.Add(1)
		d.hold(ml.Keys(), ms)
	}
	d.set(i, "done")
}

// hold counts ms's holders in on its keys, checks its fences, holds for a millisecond and
// releases it.
func (d *deadlockRun) hold(keys []string, ms *primitives.MultiLease) {
	ls := ms.Leases()
	var leave []func()
	for j, k := range keys {
		leave = append(leave, d.occ[k].Enter(1))
		if prev := d.last[k].Swap(ls[j].Fence()); ls[j].Fence() <= prev {
			d.report("key %q: fence %d granted after fence %d", k, ls[j].Fence(), prev)
		}
	}
	time.Sleep(time.Millisecond)
	for _, f := range leave {
		f()
	}
	if err := ms.Err(); err != nil {
		d.report("MultiLock %v lost while held: %v", keys, err)
	}
	if err := ms.Release(context.Background()); err != nil {
		d.report("MultiLock %v: Release: %v", keys, err)
	}
}

// wait waits for the rounds (wg) to end, and fails the test at once when they outlive their
// ctx by 10s.
func (d *deadlockRun) wait(wg *sync.WaitGroup) {
	d.t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(DeadlockBound + 10*time.Second):
		// An Acquire that outlives its ctx by 10s is a bug of its own: give up on it.
		d.mu.Lock()
		d.over = true
		d.mu.Unlock()
		d.t.Fatalf("the MultiLocks did not return within 10s of their ctx's end; each MultiLock then:%s", d.others())
	}
}

// errDeadlock is the cause of MultiLocksNeverDeadlock's ctx's end.
var errDeadlock = errors.New("deadlock bound reached")

// MultiLeaseExcludesMutexes proves that a MultiLease holds each of its keys as a Mutex would. ml
// (over two keys or more, given out of sorted order, with a TTL of a minute or more so that only
// its release frees a key) acquires; its Leases are one per key in the order given, each held;
// a Mutex on each key (mutex returns one, on a Store of its own) is refused while it holds, and
// granted once it is released, when Done is closed and Err is nil.
func MultiLeaseExcludesMutexes(t testing.TB, ml *primitives.MultiLock, mutex func(key string) *primitives.Mutex) {
	t.Helper()
	ctx := context.Background()
	keys := ml.Keys()
	if len(keys) < 2 || slices.IsSorted(keys) {
		t.Fatalf("MultiLeaseExcludesMutexes needs two keys or more given out of sorted order, to check the order of Leases; got %q", keys)
	}
	ms, err := ml.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ls := ms.Leases()
	if len(ls) != len(keys) {
		t.Fatalf("%d leases for the keys %q, want one per key", len(ls), keys)
	}
	for i, k := range keys {
		if ls[i].Key() != k || ls[i].Err() != nil {
			t.Errorf("Leases()[%d]: on %q, Err %v; want on %q (the order given), held", i, ls[i].Key(), ls[i].Err(), k)
		}
		l, err := mutex(k).TryAcquire(ctx)
		if !errors.Is(err, primitives.ErrNotAcquired) {
			t.Errorf("a Mutex on %q while the MultiLease holds it: %v, want ErrNotAcquired", k, err)
		}
		if l != nil {
			l.Release(ctx)
		}
	}
	select {
	case <-ms.Done():
		t.Fatalf("Done closed while the MultiLease holds (Err %v)", ms.Err())
	default:
	}
	if err := ms.Release(ctx); err != nil || ms.Err() != nil {
		t.Fatalf("Release: %v, then Err %v; want nil and nil", err, ms.Err())
	}
	select {
	case <-ms.Done():
	default:
		t.Errorf("Done not closed after Release")
	}
	for _, k := range keys {
		free(t, mutex(k), "after the MultiLease's Release")
	}
}

// FailedMultiLockHoldsNothing proves that a MultiLock acquire that fails leaves nothing held.
// With the last of its keys in sorted order held by a Mutex (so that it takes every other key
// before it finds that one held): a TryAcquire is refused with ErrNotAcquired; an Acquire whose
// acquire timeout passes fails with ErrNotAcquired; an Acquire whose ctx is canceled once it holds
// every other key returns ctx's error. After each the other keys are free (a Mutex on each is
// granted) and the Mutex's lease is still held. multiLock returns a MultiLock over the same two
// keys or more, with the options given (the scenario's acquire timeouts) after its own, each on a
// Store of its own and with a TTL of a minute or more, so that only a release frees a key; mutex
// returns a Mutex on a key, on a Store of its own. The scenario calls both on t's goroutine.
func FailedMultiLockHoldsNothing(t testing.TB, multiLock func(opts ...primitives.Option) *primitives.MultiLock, mutex func(key string) *primitives.Mutex) {
	t.Helper()
	ctx := context.Background()
	keys := multiLock().Keys()
	if len(keys) < 2 {
		t.Fatalf("FailedMultiLockHoldsNothing needs two keys or more, to see the others released; got %q", keys)
	}
	f := &failedMultiLock{t: t, multiLock: multiLock, mutex: mutex, last: slices.Max(keys)}
	for _, k := range keys {
		if k != f.last {
			f.rest = append(f.rest, k)
		}
	}
	var err error
	if f.held, err = mutex(f.last).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	defer f.held.Release(ctx)

	if ms, err := multiLock().TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		if ms != nil {
			ms.Release(ctx)
		}
		t.Fatalf("TryAcquire with %q held: %v, want ErrNotAcquired", f.last, err)
	}
	f.after("a refused TryAcquire")

	timeout := 300 * time.Millisecond
	if ms, err := multiLock(primitives.WithAcquireTimeout(timeout)).Acquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		if ms != nil {
			ms.Release(ctx)
		}
		t.Fatalf("Acquire with %q held and an acquire timeout of %v: %v, want ErrNotAcquired", f.last, timeout, err)
	}
	f.after("an Acquire that timed out")

	f.canceledWhileWaiting()
	f.after("an Acquire canceled while it waited")
}

// failedMultiLock is FailedMultiLockHoldsNothing's MultiLock over keys whose last, in sorted
// order, a Mutex holds.
type failedMultiLock struct {
	t         testing.TB
	multiLock func(opts ...primitives.Option) *primitives.MultiLock
	mutex     func(key string) *primitives.Mutex
	last      string           // the key the Mutex holds
	rest      []string         // the other keys
	held      primitives.Lease // the Mutex's lease on last
}

// after fails the test unless, after what failed, the other keys are free and the Mutex still
// holds the last.
func (f *failedMultiLock) after(what string) {
	t, ctx := f.t, context.Background()
	t.Helper()
	for _, k := range f.rest {
		free(t, f.mutex(k), "after "+what)
	}
	if err := f.held.Err(); err != nil {
		t.Fatalf("the Mutex's lease on %q after %s: %v, want held", f.last, what, err)
	}
	if l, err := f.mutex(f.last).TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		if l != nil {
			l.Release(ctx)
		}
		t.Fatalf("another Mutex on %q after %s: %v, want ErrNotAcquired (the first still holds it)", f.last, what, err)
	}
}

// canceledWhileWaiting cancels an Acquire once it holds the other keys and waits for the last,
// and fails the test unless it returns context.Canceled within 10s.
func (f *failedMultiLock) canceledWhileWaiting() {
	t, ctx := f.t, context.Background()
	t.Helper()
	// Canceled once it holds the others and waits for the last: a Mutex on each of the others is
	// refused. A poll that is granted one releases it at once, and the MultiLock takes it then.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	waiter := f.multiLock(primitives.WithAcquireTimeout(time.Hour))
	GoBackground(t, func(context.Context) {
		ms, err := waiter.Acquire(wctx)
		if ms != nil {
			ms.Release(ctx)
		}
		got <- err
	})
	probes := make(map[string]*primitives.Mutex)
	for _, k := range f.rest {
		probes[k] = f.mutex(k)
	}
	poll.Until(t, fmt.Sprintf("the waiting MultiLock holding %q", f.rest), func() bool {
		for _, k := range f.rest {
			l, err := probes[k].TryAcquire(ctx)
			if err == nil {
				l.Release(ctx)
				return false
			}
		}
		return true
	})
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire canceled while it waited for %q: %v, want context.Canceled", f.last, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Acquire did not return within 10s of its ctx's cancellation")
	}
}

// free waits until a TryAcquire of m is granted, releasing the lease, and fails t if that has not
// happened within poll.Timeout: a key left held by a lease with a TTL of a minute or more. It
// polls, as a store may finish a release after it returns (Redlock, on a late node).
func free(t testing.TB, m *primitives.Mutex, when string) {
	t.Helper()
	poll.For(t, fmt.Sprintf("a Mutex on %q granted %s", m.Key(), when), func() (error, bool) {
		l, err := m.TryAcquire(context.Background())
		if err != nil {
			return err, false
		}
		if err := l.Release(context.Background()); err != nil {
			return err, false
		}
		return nil, true
	})
}
