package etcd

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// The tests here make a transaction's outcome unknown deterministically: the transaction
// commits in etcd, and its caller is answered with the error of a lost reply. They check that
// the etcd lease such a grant is on carries no other grant, that a grant reported to its caller
// is never ended by the revoke of such a lease, and that the key is free within the grant's TTL
// even when the revoke cannot reach etcd.

// lossy is what a test makes a Store's client do: lose the reply of the next writing
// transactions that commit, and fail or block revokes.
type lossy struct {
	lose   atomic.Int32 // how many of the next committed writes lose their reply
	revoke atomic.Int32 // revokeSent, revokeFails or revokeBlocks
	tried  atomic.Int32 // revokes that did not reach etcd
}

const (
	revokeSent   = iota
	revokeFails  // answered at once with Unavailable, as with etcd's port closed
	revokeBlocks // no answer until the caller's ctx ends, as with etcd partitioned away
)

func (l *lossy) takeLoss() bool {
	for {
		n := l.lose.Load()
		if n <= 0 {
			return false
		}
		if l.lose.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

type lossyKV struct {
	clientv3.KV
	l *lossy
}

func (k lossyKV) Txn(ctx context.Context) clientv3.Txn { return &lossyTxn{Txn: k.KV.Txn(ctx), l: k.l} }

type lossyTxn struct {
	clientv3.Txn
	l      *lossy
	writes bool
}

func (t *lossyTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *lossyTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *lossyTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.writes = t.writes || op.IsPut()
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *lossyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && resp.Succeeded && t.writes && t.l.takeLoss() {
		return nil, status.Error(codes.Unavailable, "the reply was lost")
	}
	return resp, err
}

type lossyLease struct {
	clientv3.Lease
	l *lossy
}

func (x lossyLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	switch x.l.revoke.Load() {
	case revokeFails:
		x.l.tried.Add(1)
		return nil, status.Error(codes.Unavailable, "etcd cannot be reached")
	case revokeBlocks:
		x.l.tried.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return x.Lease.Revoke(ctx, id)
}

// lossyStore returns a Store on the shared server whose client l makes lose replies and
// revokes, and a client of the server's that sees etcd as it is.
func lossyStore(t *testing.T) (*Store, *lossy, *clientv3.Client) {
	t.Helper()
	srv := etcdtest.Shared(t)
	c := srv.Client(t)
	l := &lossy{}
	c.KV = lossyKV{KV: c.KV, l: l}
	c.Lease = lossyLease{Lease: c.Lease, l: l}
	s, err := New(c, WithPrefix(uniquePrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, l, srv.Client(t)
}

func uniquePrefix(t *testing.T) string {
	return "outcome/" + t.Name() + "/" + time.Now().Format(time.RFC3339Nano) + "/"
}

// leaseOf returns the etcd lease holder's lease record on key is on, or 0 without one.
func leaseOf(t *testing.T, s *Store, raw *clientv3.Client, key, holder string) clientv3.LeaseID {
	t.Helper()
	r, err := raw.Get(context.Background(), s.keys(key).of(kindLease, holder))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return 0
	}
	return clientv3.LeaseID(r.Kvs[0].Lease)
}

func leasesHeld(t *testing.T, s *Store, key string) []core.LeaseInfo {
	t.Helper()
	snap, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Leases
}

func grantOf(key, holder string, ttl time.Duration, unshared bool) core.AcquireRequest {
	return core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: ttl, Unshared: unshared}
}

func granted(t *testing.T, s *Store, r core.AcquireRequest) core.AcquireResult {
	t.Helper()
	res, err := s.Acquire(context.Background(), r)
	if err != nil || !res.Granted {
		t.Fatalf("Acquire(%s on %s) = %+v, %v; want a grant", r.Holder, r.Key, res, err)
	}
	return res
}

func cutShort(t *testing.T, s *Store, l *lossy, r core.AcquireRequest) {
	t.Helper()
	l.lose.Store(1)
	if res, err := s.Acquire(context.Background(), r); err == nil {
		t.Fatalf("Acquire(%s) whose reply was lost = %+v, nil; want an error", r.Holder, res)
	}
	if l.lose.Load() != 0 {
		t.Fatalf("Acquire(%s) committed no grant to lose the reply of", r.Holder)
	}
}

// TestDrawnHoldersGrantOfUnknownOutcomeIsRevokedAtOnce: a drawn holder's grant that committed
// while its caller was told it failed (a minute's TTL) holds the key only for the revoke's round
// trip.
func TestDrawnHoldersGrantOfUnknownOutcomeIsRevokedAtOnce(t *testing.T) {
	t.Parallel()
	s, l, _ := lossyStore(t)
	cutShort(t, s, l, grantOf("k", "a", time.Minute, true))
	poll.Within(t, 3*time.Second, "the key free after the grant of unknown outcome", func() ([]core.LeaseInfo, bool) {
		ls := leasesHeld(t, s, "k")
		return ls, len(ls) == 0
	})
}

// TestGrantOfUnknownOutcomeWhoseRevokeFailsEndsWithinItsTTL: when etcd cannot be reached for
// the revoke, a drawn holder's grant of unknown outcome is renewed by nobody: the key is free
// within the grant's TTL (and etcd's resolution) of the call. Its etcd lease, freed meanwhile by
// the give-back, never carries the Store's next grant of that TTL.
func TestGrantOfUnknownOutcomeWhoseRevokeFailsEndsWithinItsTTL(t *testing.T) {
	t.Parallel()
	s, l, raw := lossyStore(t)
	l.revoke.Store(revokeFails)
	start := time.Now()
	cutShort(t, s, l, grantOf("left", "a", time.Second, true))
	cutShort(t, s, l, grantOf("given", "b", time.Second, true))
	lb := leaseOf(t, s, raw, "given", "b")
	if lb == 0 {
		t.Fatal("b's grant, committed, is not in etcd")
	}
	// primitives' give-back: a Release of any fence of the drawn holder.
	if ok, err := s.Release(context.Background(), core.ReleaseRequest{Key: "given", Holder: "b"}); err != nil || !ok {
		t.Fatalf("give-back Release(b) = %v, %v; want the committed grant released", ok, err)
	}
	granted(t, s, grantOf("next", "c", time.Second, true))
	if lc := leaseOf(t, s, raw, "next", "c"); lc == lb {
		t.Errorf("c's grant is on etcd lease %x, the one b's grant of unknown outcome was on, whose revoke is owed", lc)
	}
	poll.Within(t, time.Second+resolutionInternal+500*time.Millisecond, "the key of the grant of unknown outcome free within its TTL", func() ([]core.LeaseInfo, bool) {
		ls := leasesHeld(t, s, "left")
		return ls, len(ls) == 0
	})
	t.Logf("free %v after the call; %d revokes failed", time.Since(start).Round(time.Millisecond), l.tried.Load())
	if l.tried.Load() == 0 {
		t.Error("no revoke was tried")
	}
}

// resolutionInternal is how late an etcd lease may end after the TTL asked (main_test.go's
// resolution, for the package's own tests).
const resolutionInternal = 1500 * time.Millisecond

// TestSharedHoldersGrantOfUnknownOutcomeIsKeptForTheHolder: a grant of unknown outcome under a
// holder id that may be shared is left to its TTL, not revoked: the holder's next Acquire gets
// it, with its fence, and keeps it. Its etcd lease carries no other grant of the Store's.
func TestSharedHoldersGrantOfUnknownOutcomeIsKeptForTheHolder(t *testing.T) {
	t.Parallel()
	s, l, raw := lossyStore(t)
	cutShort(t, s, l, grantOf("k", "h", time.Minute, false))
	lh := leaseOf(t, s, raw, "k", "h")
	if lh == 0 {
		t.Fatal("h's grant, committed, is not in etcd")
	}
	granted(t, s, grantOf("other", "x", time.Minute, false))
	if lx := leaseOf(t, s, raw, "other", "x"); lx == lh {
		t.Errorf("x's grant is on etcd lease %x, which h's grant of unknown outcome is on", lx)
	}
	res := granted(t, s, grantOf("k", "h", time.Minute, false))
	<-s.bg.idle() // the revokes the Store owes are done
	ls := leasesHeld(t, s, "k")
	if len(ls) != 1 || ls[0].Holder != "h" || ls[0].Fence != res.Fence {
		t.Fatalf("after h's Acquire (fence %d) and the Store's background work: %+v; want h's lease", res.Fence, ls)
	}
}

// TestRegrantOfUnknownOutcomeEndsNotTheGrantReported: a drawn holder's grant reported to it,
// asked for again (primitives does so when a grant came back too late) with the reply of that
// re-grant lost: the reported grant holds on, with its fence, wherever its records are, and can
// be extended; the etcd lease the re-grant may have moved it to carries no other grant.
func TestRegrantOfUnknownOutcomeEndsNotTheGrantReported(t *testing.T) {
	t.Parallel()
	s, l, raw := lossyStore(t)
	a := granted(t, s, grantOf("k", "a", time.Minute, true))
	cutShort(t, s, l, grantOf("k", "a", time.Minute, true))
	<-s.bg.idle()
	ls := leasesHeld(t, s, "k")
	if len(ls) != 1 || ls[0].Holder != "a" || ls[0].Fence != a.Fence {
		t.Fatalf("after a re-grant of unknown outcome: %+v; want a's lease of fence %d", ls, a.Fence)
	}
	if _, err := s.Extend(context.Background(), core.ExtendRequest{Key: "k", Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatalf("Extend(a) after a re-grant of unknown outcome: %v", err)
	}
	la := leaseOf(t, s, raw, "k", "a")
	granted(t, s, grantOf("other", "x", time.Minute, true))
	if lx := leaseOf(t, s, raw, "other", "x"); lx == la {
		t.Errorf("x's grant is on etcd lease %x, which a's grant is on", lx)
	}
}

// TestExtendOfUnknownOutcomeSharesNoEtcdLease: an Extend to another TTL whose reply is lost
// moved the records onto etcd leases of its own; the holder's next Extend renews them, and the
// Store's next grants of that TTL, and of the old one, go on other etcd leases.
func TestExtendOfUnknownOutcomeSharesNoEtcdLease(t *testing.T) {
	t.Parallel()
	s, l, raw := lossyStore(t)
	granted(t, s, grantOf("k", "a", time.Minute, true))
	before := leaseOf(t, s, raw, "k", "a")
	l.lose.Store(1)
	if _, err := s.Extend(context.Background(), core.ExtendRequest{Key: "k", Holder: "a", TTL: 2 * time.Minute}); err == nil {
		t.Fatal("Extend whose reply was lost = nil; want an error")
	}
	moved := leaseOf(t, s, raw, "k", "a")
	if moved == before || moved == 0 {
		t.Fatalf("a's records on etcd lease %x, before %x; want them moved", moved, before)
	}
	if _, err := s.Extend(context.Background(), core.ExtendRequest{Key: "k", Holder: "a", TTL: 2 * time.Minute}); err != nil {
		t.Fatalf("Extend(a) again: %v", err)
	}
	for i, ttl := range []time.Duration{2 * time.Minute, time.Minute} {
		key := []string{"two", "one"}[i]
		granted(t, s, grantOf(key, "x", ttl, true))
		if lx := leaseOf(t, s, raw, key, "x"); lx == moved {
			t.Errorf("x's grant of %v is on etcd lease %x, which a's grant is on", ttl, lx)
		}
	}
	if ls := leasesHeld(t, s, "k"); len(ls) != 1 || ls[0].Holder != "a" || ls[0].TTL < time.Minute {
		t.Errorf("a's lease after its Extends: %+v; want it held for two minutes", ls)
	}
}

// TestTakenLineGrantOfUnknownOutcomeLeavesTheSessionAlone: a waiter takes the grant the line
// made it (on the Store's session lease) with the reply lost: the grant is revoked, the next
// waiter in that line (another Store's) is served, and the Store's places in other lines, on the
// same session lease, stay.
func TestTakenLineGrantOfUnknownOutcomeLeavesTheSessionAlone(t *testing.T) {
	t.Parallel()
	s, l, _ := lossyStore(t)
	o, err := New(etcdtest.Shared(t).Client(t), WithPrefix(s.prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx := context.Background()
	h := granted(t, o, grantOf("k", "h", time.Minute, true))
	granted(t, o, grantOf("k2", "h2", time.Minute, true))
	wait := func(key, holder string) core.Wake {
		r := grantOf(key, holder, time.Minute, true)
		r.Wait = time.Minute
		if res, err := s.Acquire(ctx, r); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want a refusal", holder, res, err)
		}
		w, err := s.Register(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		return w
	}
	w := wait("k", "w")
	wait("k2", "x")
	y := grantOf("k", "y", time.Minute, true)
	y.Wait = time.Minute
	if res, err := o.Acquire(ctx, y); err != nil || res.Granted {
		t.Fatalf("Acquire(y) = %+v, %v; want a refusal", res, err)
	}
	yw, err := o.Register(ctx, y)
	if err != nil {
		t.Fatal(err)
	}
	defer yw.Close()
	select { // the wake of the Register itself, if any
	case <-w.C():
	default:
	}
	if ok, err := o.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatal("w was not woken by the line's grant")
	}
	r := grantOf("k", "w", time.Minute, true)
	r.Wait = time.Minute
	cutShort(t, s, l, r)
	deadline := time.After(5 * time.Second)
	for served := false; !served; {
		select {
		case <-yw.C():
		case <-deadline:
			t.Fatalf("y, next in line, was not served after w's grant of unknown outcome: %+v", leasesHeld(t, o, "k"))
		}
		res, err := o.Acquire(ctx, y)
		if err != nil {
			t.Fatal(err)
		}
		served = res.Granted
	}
	<-s.bg.idle()
	snap, err := o.Inspect(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Waiters) != 1 || snap.Waiters[0].Holder != "x" {
		t.Errorf("the line of k2 after w's grant of unknown outcome: %+v; want x's place", snap.Waiters)
	}
}

// TestCloseWhileARevokeOfUnknownOutcomeHangs: Close while the revoke of a grant of unknown
// outcome gets no answer returns in about a second, and the revoke's background work ends with
// it.
func TestCloseWhileARevokeOfUnknownOutcomeHangs(t *testing.T) {
	t.Parallel()
	s, l, _ := lossyStore(t)
	l.revoke.Store(revokeBlocks)
	cutShort(t, s, l, grantOf("k", "a", time.Minute, true))
	poll.Within(t, 3*time.Second, "the revoke sent", func() (int32, bool) {
		n := l.tried.Load()
		return n, n > 0
	})
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	d := time.Since(start)
	t.Logf("Close while a revoke hangs: %v", d.Round(time.Millisecond))
	if d > 2*time.Second {
		t.Errorf("Close took %v; want about a second", d.Round(time.Millisecond))
	}
	select {
	case <-s.bg.idle():
	default:
		t.Error("the Store's background work outlives its Close")
	}
	if _, err := s.Acquire(context.Background(), grantOf("k", "b", time.Minute, true)); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Acquire after Close: %v; want ErrClosed", err)
	}
}

// spareKept reports whether s keeps the etcd lease id as a spare.
func spareKept(s *Store, id clientv3.LeaseID) bool {
	s.spares.mu.Lock()
	defer s.spares.mu.Unlock()
	return s.spares.in[id]
}

// lineGrantCutShort sets up key k held by a (on s, limit 2, both permits) with the heads h1 and
// h2 waiting through o, and releases a through s with the reply of the transaction that grants
// the heads lost. It returns the etcd lease their grants are on.
func lineGrantCutShort(t *testing.T, s, o *Store, l *lossy, raw *clientv3.Client) clientv3.LeaseID {
	t.Helper()
	ctx := context.Background()
	a := granted(t, s, core.AcquireRequest{Key: "k", Holder: "a", Permits: 2, Limit: 2, TTL: time.Minute})
	for _, h := range []string{"h1", "h2"} {
		r := core.AcquireRequest{Key: "k", Holder: h, Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute}
		if res, err := o.Acquire(ctx, r); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want a refusal", h, res, err)
		}
	}
	l.lose.Store(1)
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: a.Fence}); err == nil {
		t.Fatalf("Release(a) whose reply was lost = %v, nil; want an error", ok)
	}
	if l.lose.Load() != 0 {
		t.Fatal("Release(a) committed no grant to lose the reply of")
	}
	g := leaseOf(t, s, raw, "k", "h1")
	if g == 0 || leaseOf(t, s, raw, "k", "h2") != g {
		t.Fatalf("after the release: h1's grant on %x, h2's on %x; want both on one etcd lease", g, leaseOf(t, s, raw, "k", "h2"))
	}
	return g
}

// TestReleaseCutInFlightKeepsTheGrantLeaseOutOfTheSpares: a release that grants the line's heads
// with its reply lost did put their grants on the etcd lease it asked for: that lease is no spare
// of the releasing Store's, and its next grant of that TTL goes on another.
func TestReleaseCutInFlightKeepsTheGrantLeaseOutOfTheSpares(t *testing.T) {
	t.Parallel()
	s, l, raw := lossyStore(t)
	o, err := New(etcdtest.Shared(t).Client(t), WithPrefix(s.prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	g := lineGrantCutShort(t, s, o, l, raw)
	if spareKept(s, g) {
		t.Errorf("the etcd lease %x the heads' grants are on is a spare of the releasing Store's", g)
	}
	granted(t, s, grantOf("other", "x", time.Duration(seconds(s.sessionTTL))*time.Second, false))
	if lx := leaseOf(t, s, raw, "other", "x"); lx == g {
		t.Errorf("x's grant is on etcd lease %x, which the heads' grants are on", lx)
	}
}

// TestLeaveCutInFlightKeepsTheGrantLeaseOutOfTheSpares: a waiter gives back the grant the line
// made it with the reply of that leave, which grants the next head, lost: neither the etcd lease
// the next head's grant is on nor the one the given-back grant shares with it is a spare of the
// leaving Store's.
func TestLeaveCutInFlightKeepsTheGrantLeaseOutOfTheSpares(t *testing.T) {
	t.Parallel()
	s, l, raw := lossyStore(t)
	o, err := New(etcdtest.Shared(t).Client(t), WithPrefix(s.prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx := context.Background()
	h := granted(t, o, grantOf("k", "h", time.Minute, false))
	for _, w := range []struct {
		s      *Store
		holder string
	}{{s, "w"}, {o, "y"}} {
		r := grantOf("k", w.holder, time.Minute, false)
		r.Wait = time.Minute
		if res, err := w.s.Acquire(ctx, r); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want a refusal", w.holder, res, err)
		}
	}
	if ok, err := o.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "h", Fence: h.Fence}); err != nil || !ok {
		t.Fatalf("Release(h) = %v, %v", ok, err)
	}
	gw := leaseOf(t, s, raw, "k", "w")
	if gw == 0 {
		t.Fatal("the release did not grant w")
	}
	l.lose.Store(1)
	s.leaveInBackground("k", "w", false)
	poll.Within(t, 10*time.Second, "w's grant given back to y", func() (clientv3.LeaseID, bool) {
		gy := leaseOf(t, s, raw, "k", "y")
		return gy, gy != 0 && leaseOf(t, s, raw, "k", "w") == 0
	})
	poll.Within(t, 15*time.Second, "w's leave done", func() (bool, bool) { return true, !s.leaves.Pending() })
	if l.lose.Load() != 0 {
		t.Fatal("the leave committed nothing to lose the reply of")
	}
	gy := leaseOf(t, s, raw, "k", "y")
	if spareKept(s, gy) {
		t.Errorf("the etcd lease %x y's grant is on is a spare of the leaving Store's", gy)
	}
	granted(t, s, grantOf("other", "x", time.Duration(seconds(s.sessionTTL))*time.Second, false))
	if lx := leaseOf(t, s, raw, "other", "x"); lx == gy {
		t.Errorf("x's grant is on etcd lease %x, which y's grant is on", lx)
	}
}

// TestTakeCutInFlightKeepsTheGrantLeaseOutOfTheSpares: a waiter takes the grant the line made it
// with the reply lost: the etcd lease the grant was on, which another head's grant of the same
// release is still on, is no spare of the taker's Store.
func TestTakeCutInFlightKeepsTheGrantLeaseOutOfTheSpares(t *testing.T) {
	t.Parallel()
	s, l, raw := lossyStore(t)
	o, err := New(etcdtest.Shared(t).Client(t), WithPrefix(s.prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx := context.Background()
	a := granted(t, o, core.AcquireRequest{Key: "k", Holder: "a", Permits: 2, Limit: 2, TTL: time.Minute})
	var wake core.Wake
	for _, w := range []struct {
		s      *Store
		holder string
	}{{s, "h1"}, {o, "h2"}} {
		r := core.AcquireRequest{Key: "k", Holder: w.holder, Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute}
		if res, err := w.s.Acquire(ctx, r); err != nil || res.Granted {
			t.Fatalf("Acquire(%s) = %+v, %v; want a refusal", w.holder, res, err)
		}
		if w.s == s {
			if wake, err = s.Register(ctx, r); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(wake.Close)
		}
	}
	if ok, err := o.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a", Fence: a.Fence}); err != nil || !ok {
		t.Fatalf("Release(a) = %v, %v", ok, err)
	}
	g := leaseOf(t, s, raw, "k", "h1")
	poll.Within(t, 10*time.Second, "s's watch seeing h1's grant", func() (bool, bool) {
		_, ok := s.untaken("k", "h1")
		return ok, ok
	})
	l.lose.Store(1)
	r := core.AcquireRequest{Key: "k", Holder: "h1", Permits: 1, Limit: 2, TTL: time.Minute, Wait: time.Minute}
	if res, err := s.Acquire(ctx, r); err == nil {
		t.Fatalf("Acquire(h1) whose reply was lost = %+v, nil; want an error", res)
	}
	if l.lose.Load() != 0 {
		t.Fatal("Acquire(h1) committed no take to lose the reply of")
	}
	if spareKept(s, g) {
		t.Errorf("the etcd lease %x h2's grant is on is a spare of the taker's Store", g)
	}
	if got := leaseOf(t, s, raw, "k", "h2"); got != g {
		t.Errorf("h2's grant on %x; want it still on %x", got, g)
	}
}
