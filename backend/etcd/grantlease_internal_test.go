package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A grant lease settled twice (commitOn settles it, and so does the Release that asked for it
// ahead) is kept as a spare once: a second keep, after another grant took the spare, would give
// one etcd lease to two grants.
func TestGrantLeaseSettledTwiceIsKeptOnce(t *testing.T) {
	t.Parallel()
	s, err := New(etcdtest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	g := &grantLease{s: s}
	id, err := g.get(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	g.settle()
	if got, ok := s.spares.take(60); !ok || got != id {
		t.Fatalf("spare after the first settle: %x, %v; want %x", got, ok, id)
	}
	g.settle() // the spare is another grant's now
	if got, ok := s.spares.take(60); ok {
		t.Fatalf("the second settle kept %x as a spare again", got)
	}
	s.recycle(spare{id, 60})
}

// A release whose key's line has gone since its last release through the Store asked for the
// grants' etcd lease ahead for nothing: it keeps it as a spare, which its next grant of that
// TTL takes, and leaves no lease behind.
func TestLeaseAskedAheadForNothingIsASpare(t *testing.T) {
	t.Parallel()
	const ttl = 7 * time.Second
	s, err := New(etcdtest.Shared(t).Client(t), WithSessionTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	key := fmt.Sprint(t.Name(), rand.Int64()) // -count: not a run's before
	req := core.AcquireRequest{Key: key, Holder: "a", Permits: 1, Limit: 1, TTL: time.Minute}
	if res, err := s.Acquire(ctx, req); err != nil || !res.Granted {
		t.Fatalf("Acquire(a): %+v, %v", res, err)
	}
	s.lines.note(key, true) // a line at the last release
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
		t.Fatalf("Release(a): %v, %v", ok, err)
	}
	if s.lines.had(key) {
		t.Error("the release met no line, yet the Store still expects one")
	}
	if _, ok := s.spares.take(seconds(ttl)); !ok {
		t.Error("the lease asked for ahead is not a spare")
	}
}

// A spare is dated from the last time etcd granted or renewed it, not from its return: one whose
// last renewal leaves it less than its margin is let go, not taken for a grant (a renewal of a
// lease etcd has ended holds up the Store's renewal stream); and a lease the Store never granted
// nor renewed (another Store's) is revoked, not kept, for its age is unknown.
func TestSpareIsDatedFromItsLastRenewal(t *testing.T) {
	t.Parallel()
	c := etcdtest.Shared(t).Client(t)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	lease := func() clientv3.LeaseID {
		g, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Revoke(context.Background(), g.ID) })
		return g.ID
	}
	fresh, old, foreign := lease(), lease(), lease()
	s.spares.lived(fresh, time.Now().Add(-50*time.Second), 60)       // 10 s left
	s.spares.lived(old, time.Now().Add(-59800*time.Millisecond), 60) // 200 ms left
	s.recycle(spare{fresh, 60}, spare{old, 60}, spare{foreign, 60})
	if id, ok := s.spares.take(60); !ok || id != fresh {
		t.Fatalf("take(60) = %x, %v; want the spare renewed 50 s ago, %x", id, ok, fresh)
	}
	if id, ok := s.spares.take(60); ok {
		t.Fatalf("take(60) = %x; want none: the other spare ends within its margin, the third is not the Store's", id)
	}
	poll.Within(t, 5*time.Second, "the lease of unknown age revoked", func() (int64, bool) {
		r, err := c.TimeToLive(ctx, foreign)
		return r.TTL, err == nil && r.TTL == -1
	})
}
