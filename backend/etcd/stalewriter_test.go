package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// staleRun is the stale holder's scenario on a key: holder a takes it and writes to a resource
// fenced in etcd every 10ms, minding nothing (a holder stalled or cut off does not know); a
// fault makes it lose its lease; holder b then takes the key (next) and writes too, until a has
// had writes refused; a releases the key meanwhile, which must leave b's lease alone. finish
// checks that no write landed out of fence order, that etcd holds the resource's writes in
// rising fence order, that a's writes after b's were refused, that the two holders' tenures
// (a's until its lease's deadline) never overlapped, and the history of both.
type staleRun struct {
	t        *testing.T
	key, res string
	cb       *clientv3.Client // b's, and the check's
	rec      history.Recorder
	b        *primitives.Mutex
	la, lb   core.Lease
	aFrom    time.Time
	aLostAt  chan time.Time
	bFrom    time.Time
	bTo      time.Time
	stopA    chan struct{}
	aDone    chan struct{}
	bDone    chan struct{}
	bWrote   chan struct{} // closed once b's first write was accepted
	wrote    bool
	refusedA atomic.Int32
}

// startStale starts holder a on key, its Store and writes on ca, and returns once a write of
// its was accepted; b's Store and writes are on cb.
func startStale(t *testing.T, ca, cb *clientv3.Client, key string, ttl time.Duration) *staleRun {
	t.Helper()
	r := &staleRun{t: t, key: key, res: "resource/" + key, cb: cb, aLostAt: make(chan time.Time, 1),
		stopA: make(chan struct{}), aDone: make(chan struct{})}
	a, err := primitives.NewMutex(history.Record(clientStore(t, ca), &r.rec), key, primitives.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// b's TTL is longer: only a's lease is meant to be lost; with a's 1s, b's refreshes missed
	// their deadline when two runs of the suite shared two loaded cores.
	r.b, err = primitives.NewMutex(history.Record(clientStore(t, cb), &r.rec), key, primitives.WithTTL(5*ttl),
		primitives.WithAcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if r.la, err = a.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.aFrom = time.Now()
	go func() {
		<-r.la.Done()
		r.aLostAt <- time.Now()
	}()
	var accepted atomic.Int32
	go func() {
		defer close(r.aDone)
		for {
			select {
			case <-r.stopA:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			w := r.write(ctx, ca, "a", r.la.Fence())
			cancel()
			switch {
			case w.Accepted:
				accepted.Add(1)
			case w.Stale:
				r.refusedA.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { r.stop() })
	poll.Until(t, "the stale holder's first write accepted", func() bool { return accepted.Load() > 0 })
	return r
}

// write writes to the resource with fence, records the write, and returns it.
func (r *staleRun) write(ctx context.Context, c *clientv3.Client, holder string, fence uint64) history.Write {
	w := history.Write{Resource: r.res, Holder: holder, Fence: fence, Call: time.Now()}
	err := fencedAppend(ctx, c, r.res, holder, fence)
	w.Return = time.Now()
	w.Accepted, w.Stale = err == nil, errors.Is(err, core.ErrStaleFence)
	if err != nil && !w.Stale {
		w.Err = err // the server out of reach: it may or may not have landed
	}
	r.rec.AddWrite(w)
	return w
}

func (r *staleRun) stop() {
	select {
	case <-r.stopA:
	default:
		close(r.stopA)
	}
	<-r.aDone
}

// next starts holder b, once a has lost its lease (or will, soon): b takes the key and writes,
// every 5ms, until a has had three writes refused (or for at most 20s), then releases it.
// finish waits for it.
func (r *staleRun) next() {
	r.bDone, r.bWrote = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.bDone)
		t := r.t
		lb, err := r.b.Acquire(context.Background())
		if err != nil {
			t.Errorf("the next holder: %v", err)
			return
		}
		r.lb, r.bFrom = lb, time.Now()
		ctx, cancel := primitives.LeaseContext(context.Background(), lb)
		defer cancel()
		for end, i := time.Now().Add(20*time.Second), 0; ctx.Err() == nil && r.refusedA.Load() < 3; i++ {
			w := r.write(ctx, r.cb, "b", lb.Fence())
			if w.Stale {
				t.Errorf("the next holder's write with fence %d was refused", lb.Fence())
			}
			if w.Accepted && !r.wrote {
				r.wrote = true
				close(r.bWrote)
			}
			if i == 0 {
				// The stale holder, unaware, releases the key while b holds it: its fence no
				// longer names a lease, so b's stays (b's later writes, refreshes and release
				// would fail if it had gone).
				if err := r.la.Release(context.Background()); !errors.Is(err, core.ErrLost) {
					t.Errorf("the stale holder's Release while the next one held the key: %v, want ErrLost", err)
				}
			}
			if time.Now().After(end) {
				t.Errorf("the stale holder had %d writes refused in the next holder's first 20s", r.refusedA.Load())
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		r.bTo = time.Now()
		if err := lb.Release(context.Background()); err != nil {
			t.Errorf("the next holder's Release: %v", err)
		}
	}()
}

// hasWritten reports whether b has had a write accepted.
func (r *staleRun) hasWritten() bool {
	select {
	case <-r.bWrote:
		return true
	default:
		return false
	}
}

// staleFigures are what a staleRun measured.
type staleFigures struct {
	overlap, toldBefore time.Duration
	refused, failed     int
	landedUnseen        int // the stale holder's writes that failed for it but landed in etcd
	writes              int
	aFence, bFence      uint64
}

func (f staleFigures) String() string {
	return fmt.Sprintf("stale holder (fence %d, next %d): tenures overlapped %v; it was told of its loss %v before the next grant; of %d writes, %d refused as stale, %d failed (%d of the stale holder's failed writes landed all the same)",
		f.aFence, f.bFence, f.overlap, f.toldBefore.Round(time.Millisecond), f.writes, f.refused, f.failed, f.landedUnseen)
}

// finish stops holder a, checks the run and returns its figures.
func (r *staleRun) finish() staleFigures {
	t := r.t
	t.Helper()
	<-r.bDone
	r.stop()
	if r.lb == nil {
		t.Fatal("the next holder never ran")
	}
	var aLost time.Time
	select {
	case aLost = <-r.aLostAt:
	default:
		t.Fatal("the stale holder's lease was not reported lost")
	}
	if r.lb.Fence() <= r.la.Fence() {
		t.Errorf("the next holder's fence %d is not above the stale holder's %d", r.lb.Fence(), r.la.Fence())
	}
	ws := r.rec.Writes()
	if v := history.WritesInFenceOrder(ws); len(v) > 0 {
		t.Errorf("a stale write landed: %v", v)
	}
	refused, failed, acceptedA := history.Refused(ws), 0, 0
	for _, w := range ws {
		if w.Err != nil {
			failed++
		}
		if w.Accepted && w.Holder == "a" {
			acceptedA++
		}
	}
	if refused == 0 {
		t.Error("no write of the stale holder was refused")
	}
	// What etcd holds: the resource's writes, in the order they landed, rise in fence.
	resp, err := r.cb.Get(context.Background(), r.res+"/log/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var top uint64
	landedA := 0
	for _, kv := range resp.Kvs {
		if string(kv.Value) == "a" {
			landedA++
		}
		f, _ := strconv.ParseUint(strings.Split(strings.TrimPrefix(string(kv.Key), r.res+"/log/"), "/")[0], 10, 64)
		if f < top {
			t.Errorf("etcd holds a write of fence %d after one of %d", f, top)
		}
		top = max(top, f)
	}
	if top != r.lb.Fence() {
		t.Errorf("the last write etcd holds has fence %d, want the next holder's %d", top, r.lb.Fence())
	}
	ops := r.rec.Ops()
	if v := append(history.Linearizable(ops, time.Minute), history.FencesIncrease(ops)...); len(v) > 0 {
		t.Errorf("history: %v", v)
	}
	// No two holders at once, as the holders saw it: a's lease ran until its deadline (when it
	// was told of the loss is up to its timer, late on a loaded machine: logged, not checked).
	r.rec.AddTenure(history.Tenure{Key: r.key, Holder: "a", Fence: r.la.Fence(), From: r.aFrom, To: r.la.Deadline()})
	r.rec.AddTenure(history.Tenure{Key: r.key, Holder: "b", Fence: r.lb.Fence(), From: r.bFrom, To: r.bTo})
	f := staleFigures{overlap: history.Overlap(r.rec.Tenures()), toldBefore: r.bFrom.Sub(aLost),
		refused: refused, failed: failed, landedUnseen: landedA - acceptedA, writes: len(ws), aFence: r.la.Fence(), bFence: r.lb.Fence()}
	if f.overlap > 0 {
		t.Errorf("the next holder was granted %v before the stale holder's deadline", f.overlap)
	}
	return f
}

var appends atomic.Int64

// fencedAppend appends a write with fence to the resource res kept in etcd, in one transaction
// that refuses it (core.ErrStaleFence) when the resource has taken a higher fence: the fence
// record res/fence holds the highest (20 digits, so that etcd's byte order is the numbers'),
// and each write lands as res/log/<fence>/<n>.
func fencedAppend(ctx context.Context, c *clientv3.Client, res, holder string, fence uint64) error {
	fk, f := res+"/fence", fmt.Sprintf("%020d", fence)
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value(fk), ">", f)).
		Else(clientv3.OpPut(fk, f), clientv3.OpPut(fmt.Sprintf("%s/log/%s/%d", res, f, appends.Add(1)), holder)).Commit()
	switch {
	case err != nil:
		return err
	case resp.Succeeded:
		return fmt.Errorf("%w: %s's write with fence %d", core.ErrStaleFence, holder, fence)
	}
	return nil
}
