package etcd

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
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
