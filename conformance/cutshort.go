package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// FreeBound is how soon after the last call on a key, and the last give-back of a call that
// failed, a correct Store leaves the key free (plus its resolution, WithResolution) when every
// give-back returned without an error: what a driver finishes in the background after a call
// returns (a leave, a late release) must be done by then. A key whose give-back or release
// failed may stay held until the lease's TTL ends, then for this bound.
const FreeBound = 2 * time.Second

// cutShortTTLs are the TTLs the calls cut short ask for: long, so that a grant nobody knows of,
// left to expire, stands out from a key freed within FreeBound; two, so that an Extend may move
// a lease to another TTL (a store that keeps its leases by TTL moves records then).
var cutShortTTLs = [2]time.Duration{10 * time.Second, 11 * time.Second}

// cutShortGiveBack bounds a give-back, as the portable layer bounds its own: the lease's TTL,
// at most 2 s.
const cutShortGiveBack = 2 * time.Second

// testCallsCutShortNeitherShareNorStrandAKey drives a Store as the portable layer does, with
// most calls cut short: workers on Stores of their own acquire (a single try, or a wait),
// extend and release on a mutex and a semaphore of three permits, each call's ctx ending after
// 0.2 to 4 ms (by its deadline, or canceled in flight), a few with 100 ms. After an Acquire
// that returned an error it gives the try back as package primitives does (Release of its own
// holder id with fence 0, within 2 s, beside the next calls); a wait cut short closes its
// waiter; a Release that failed is sent again within 2 s. It checks that
//   - no more permits than the limit are held at once by holders told they hold them;
//   - no lease ends before its TTL while its holder holds it (Extend ErrLost, or a first
//     Release that finds nothing);
//   - no fence is granted twice, and a grant asked for after another returned has a higher one;
//   - once the last call and give-back have returned, each key is free within FreeBound (and
//     the store's resolution): no lease is on it and a request for every permit is granted. A
//     try its caller gave back grants nothing that stays: the give-back may reach the store
//     before the try does, so the store must keep out a try that arrives after it.
//
// It runs for a second, 3 s under WithSoak(true), and 300 ms under -short.
func (s *suite) testCallsCutShortNeitherShareNorStrandAKey(t *testing.T) {
	const workers = 6
	run := s.cutShortLength()
	c := &cutShort{t: t, s: s, keys: []cutKey{
		{name: newKey(t) + ":mutex", limit: 1, in: NewOccupancy(1)},
		{name: newKey(t) + ":semaphore", limit: 3, in: NewOccupancy(3)},
	}, owner: map[string]*holderFate{}}
	stores := make([]core.Store, workers)
	for w := range stores {
		stores[w] = s.h.NewStore(t)
	}
	end := time.Now().Add(run)
	var wg sync.WaitGroup
	for w, st := range stores {
		rnd := mrand.New(mrand.NewPCG(mrand.Uint64(), uint64(w)))
		wg.Go(func() {
			for time.Now().Before(end) && !c.failing() {
				c.round(st, rnd)
			}
		})
	}
	wg.Wait()
	c.giveBacks.Wait()
	last := time.Now()
	c.report()
	st := s.h.NewStore(t)
	for i := range c.keys {
		c.checkFree(st, &c.keys[i], last)
	}
	c.mu.Lock()
	t.Logf("%d calls (%d cut short with an error), %d grants, %d tries given back (%d failed), %d waits closed",
		c.calls, c.cutCalls, c.grants, c.givenBack, c.giveBackFailed, c.waitsClosed)
	c.mu.Unlock()
}

// cutKey is one key of the check, with the holders told they hold it.
type cutKey struct {
	name  string
	limit int
	in    *Occupancy
	// mayStay is set when a give-back or a release on the key failed: a lease may then stay
	// until its TTL ends.
	mayStay bool
}

// holderFate is what the check told itself about a holder id: granted, or failed and given
// back (and how the give-back went).
type holderFate struct {
	key       string
	granted   bool
	fence     uint64
	call, ret time.Time
	err       error // the Acquire's error, when it failed
	giveBack  string
}

type cutShort struct {
	t    *testing.T
	s    *suite
	keys []cutKey

	giveBacks sync.WaitGroup

	mu                                                              sync.Mutex
	owner                                                           map[string]*holderFate // by holder id
	problems                                                        []string
	dropped                                                         int
	calls, cutCalls, grants, givenBack, giveBackFailed, waitsClosed int
}

func (c *cutShort) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.problems) < 10 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	} else {
		c.dropped++
	}
}

func (c *cutShort) failing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.problems) > 0
}

func (c *cutShort) count(f func()) {
	c.mu.Lock()
	f()
	c.mu.Unlock()
}

// report fails the test with the problems found during the rounds, and checks the fences.
func (c *cutShort) report() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.problems {
		c.t.Error(p)
	}
	if c.dropped > 0 {
		c.t.Errorf("and %d more", c.dropped)
	}
	for _, k := range c.keys {
		if v := k.in.Violations(); len(v) > 0 {
			c.t.Errorf("%q: more permits held at once than its limit %d times; the first: %v", k.name, len(v), v[0])
		}
		var grants []*holderFate
		for _, f := range c.owner {
			if f.key == k.name && f.granted {
				grants = append(grants, f)
			}
		}
		c.checkFences(k.name, grants)
	}
}

// checkFences fails the test if two grants on key share a fence, or a grant asked for after
// another returned has a fence no higher.
func (c *cutShort) checkFences(key string, grants []*holderFate) {
	c.t.Helper()
	slices.SortFunc(grants, func(a, b *holderFate) int { return a.call.Compare(b.call) })
	seen := map[uint64]bool{}
	for _, g := range grants {
		if seen[g.fence] && c.s.sharedFences != "" {
			c.t.Logf("%q: fence %d granted to two holders (known: %s)", key, g.fence, c.s.sharedFences)
		} else if seen[g.fence] {
			c.t.Errorf("%q: fence %d granted to two holders", key, g.fence)
		}
		seen[g.fence] = true
	}
	byReturn := slices.Clone(grants)
	slices.SortFunc(byReturn, func(a, b *holderFate) int { return a.ret.Compare(b.ret) })
	var top uint64
	j := 0
	for _, g := range grants {
		for j < len(byReturn) && byReturn[j].ret.Before(g.call) {
			top = max(top, byReturn[j].fence)
			j++
		}
		if g.fence <= top {
			c.t.Errorf("%q: fence %d granted to a request sent after a grant of fence %d had returned", key, g.fence, top)
			return
		}
	}
}

// cutCtx returns a ctx that ends 0.2 to 4 ms from now, by its deadline or canceled in flight,
// or, one time in four, after 100 ms.
func cutCtx(rnd *mrand.Rand) (context.Context, context.CancelFunc) {
	d := 200*time.Microsecond + time.Duration(rnd.Int64N(int64(3800*time.Microsecond)))
	switch rnd.IntN(4) {
	case 0:
		return context.WithTimeout(context.Background(), 100*time.Millisecond)
	case 1:
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(d, cancel)
		return ctx, func() { stop.Stop(); cancel() }
	}
	return context.WithTimeout(context.Background(), d)
}

// newHolderID returns an id of the check's own, as the portable layer draws one per acquire.
func newHolderID() string {
	var b [8]byte
	rand.Read(b[:])
	return "cut-" + hex.EncodeToString(b[:])
}

// round is one acquire on a key, cut short or not, and when it is granted the holder's tenure:
// an Extend or two, then its Release.
func (c *cutShort) round(st core.Store, rnd *mrand.Rand) {
	k := &c.keys[rnd.IntN(len(c.keys))]
	permits := 1 + rnd.IntN(min(k.limit, 2))
	req := core.AcquireRequest{Key: k.name, Holder: newHolderID(), Permits: permits, Limit: k.limit,
		TTL: cutShortTTLs[rnd.IntN(2)], Unshared: true}
	wait := rnd.IntN(2) == 0
	ctx, cancel := cutCtx(rnd)
	defer cancel()
	fate := &holderFate{key: k.name, call: time.Now()}
	c.count(func() { c.owner[req.Holder] = fate })
	res, err := c.acquire(ctx, st, req, wait)
	fate.ret = time.Now()
	c.count(func() {
		c.calls++
		if err != nil {
			c.cutCalls++
		}
	})
	switch {
	case errors.Is(err, core.ErrLimitMismatch):
		c.fail("%q: Acquire with the key's own limit %d: %v", k.name, k.limit, err)
		return
	case err != nil:
		c.count(func() { fate.err = err })
		c.giveBack(st, k, req.Holder, fate)
		return
	case !res.Granted:
		return
	case res.Fence == 0:
		c.fail("%q: Acquire granted holder %s fence 0", k.name, req.Holder)
	}
	c.count(func() { fate.granted, fate.fence = true, res.Fence; c.grants++ })
	leave := k.in.Enter(permits)
	for range rnd.IntN(3) {
		ectx, ecancel := cutCtx(rnd)
		er, err := st.Extend(ectx, core.ExtendRequest{Key: k.name, Holder: req.Holder, TTL: cutShortTTLs[rnd.IntN(2)]})
		ecancel()
		switch {
		case errors.Is(err, core.ErrLost):
			c.fail("%q: holder %s (fence %d) lost its lease %v after its grant, long before its TTL of %v: Extend: %v",
				k.name, req.Holder, res.Fence, time.Since(fate.ret).Round(time.Millisecond), req.TTL, err)
		case err == nil && er.Fence != res.Fence:
			c.fail("%q: Extend of holder %s's lease of fence %d reported fence %d", k.name, req.Holder, res.Fence, er.Fence)
		}
	}
	time.Sleep(time.Duration(rnd.Int64N(int64(time.Millisecond))))
	leave()
	rctx, rcancel := cutCtx(rnd)
	held, err := st.Release(rctx, core.ReleaseRequest{Key: k.name, Holder: req.Holder, Fence: res.Fence})
	rcancel()
	if err == nil && !held {
		c.fail("%q: holder %s (fence %d) lost its lease %v after its grant, long before its TTL of %v: its Release found nothing",
			k.name, req.Holder, res.Fence, time.Since(fate.ret).Round(time.Millisecond), req.TTL)
	}
	if err != nil {
		// The lease stays until its deadline: its holder sends the Release again, as
		// Lease.Release's doc tells it to (the first may have released it: false is fine).
		ctx, cancel := context.WithTimeout(context.Background(), cutShortGiveBack)
		_, err := st.Release(ctx, core.ReleaseRequest{Key: k.name, Holder: req.Holder, Fence: res.Fence})
		cancel()
		if err != nil {
			c.count(func() { k.mayStay = true })
		}
	}
}

// acquire asks for req: once, or waiting until ctx ends, as the portable layer does (Wait is
// the time ctx has left; a refusal registers for a wake, and the waiter is closed when ctx
// ends). An error is the try's; a wait that ran out is a refusal.
func (c *cutShort) acquire(ctx context.Context, st core.Store, req core.AcquireRequest, wait bool) (core.AcquireResult, error) {
	var w core.Wake
	registered := false
	defer func() {
		if w != nil {
			w.Close()
			c.count(func() { c.waitsClosed++ })
		}
	}()
	for {
		if wait {
			dl, _ := ctx.Deadline()
			req.Wait = max(time.Until(dl), 0)
			if _, ok := ctx.Deadline(); !ok {
				req.Wait = 4 * time.Millisecond // canceled in flight: about as long as it had
			}
		}
		res, err := st.Acquire(ctx, req)
		if err != nil || res.Granted || !wait {
			return res, err
		}
		if n, ok := st.(core.Notifier); ok && !registered {
			registered = true
			var err error
			if w, err = n.Register(ctx, req); err != nil {
				w = nil
				if ctx.Err() != nil {
					return core.AcquireResult{}, nil // the wait ended: the portable layer returns, closing nothing
				}
				// Without notifications the waiter goes on, polling.
			}
		}
		var wake <-chan struct{}
		if w != nil {
			wake = w.C()
		}
		retry := time.NewTimer(min(max(res.RetryAfter, 0), time.Millisecond))
		select {
		case <-wake:
		case <-retry.C:
		case <-ctx.Done():
			retry.Stop()
			return core.AcquireResult{}, nil
		}
		retry.Stop()
	}
}

// giveBack releases, beside the next calls and within 2 s, what a failed try may have been
// granted, as the portable layer does: Release of the try's own holder id, with fence 0.
func (c *cutShort) giveBack(st core.Store, k *cutKey, holder string, fate *holderFate) {
	c.giveBacks.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cutShortGiveBack)
		defer cancel()
		held, err := st.Release(ctx, core.ReleaseRequest{Key: k.name, Holder: holder})
		c.count(func() {
			c.givenBack++
			switch {
			case err != nil:
				c.giveBackFailed++
				k.mayStay = true
				fate.giveBack = fmt.Sprintf("given back at %s: %v", time.Now().Format("15:04:05.000000"), err)
			default:
				fate.giveBack = fmt.Sprintf("given back at %s (Release reported %v)", time.Now().Format("15:04:05.000000"), held)
			}
		})
	})
}

// checkFree fails the test unless k is free within FreeBound of last (plus the store's
// resolution, and the longest TTL when a give-back or a release on it failed): Inspect lists no
// lease, and a request for every permit is granted (and released).
func (c *cutShort) checkFree(st core.Store, k *cutKey, last time.Time) {
	t := c.t
	t.Helper()
	bound := FreeBound + c.s.resolution
	if k.mayStay {
		if c.s.manual {
			t.Logf("%q: a give-back or release failed; its lease may stay until its TTL, which this backend's clock does not reach: not checked", k.name)
			return
		}
		bound += cutShortTTLs[1]
	}
	var snap core.Snapshot
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		snap, err = st.Inspect(ctx, k.name)
		if err == nil && len(snap.Leases) == 0 {
			var res core.AcquireResult
			req := core.AcquireRequest{Key: k.name, Holder: newHolderID(), Permits: k.limit, Limit: k.limit, TTL: time.Minute}
			if res, err = st.Acquire(ctx, req); err == nil && res.Granted {
				_, err = st.Release(ctx, core.ReleaseRequest{Key: k.name, Holder: req.Holder, Fence: res.Fence})
				cancel()
				if err != nil {
					t.Errorf("%q: Release of the check's own lease: %v", k.name, err)
				}
				return
			}
		}
		cancel()
		if time.Since(last) > bound {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("%q: %v after the last call: %v", k.name, time.Since(last).Round(time.Millisecond), err)
		return
	}
	var b strings.Builder
	c.mu.Lock()
	for _, l := range snap.Leases {
		fmt.Fprintf(&b, "\n\tholder %s, %d permits, fence %d, %v left: ", l.Holder, l.Permits, l.Fence, l.TTL.Round(time.Millisecond))
		switch f := c.owner[l.Holder]; {
		case f == nil:
			b.WriteString("not a holder of the check's")
		case f.err != nil:
			fmt.Fprintf(&b, "its Acquire, sent at %s, returned %v at %s; %s", f.call.Format("15:04:05.000000"), f.err, f.ret.Format("15:04:05.000000"), f.giveBack)
		default:
			fmt.Fprintf(&b, "granted fence %d at %s and released", f.fence, f.ret.Format("15:04:05.000000"))
		}
	}
	c.mu.Unlock()
	if len(snap.Leases) == 0 {
		fmt.Fprintf(&b, "\n\tno lease, but a request for all %d permits was refused (waiters: %+v)", k.limit, snap.Waiters)
	}
	t.Errorf("%q is still held %v after the last call and give-back returned (bound %v):%s",
		k.name, time.Since(last).Round(time.Millisecond), bound, b.String())
}
