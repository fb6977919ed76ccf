package etcd_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// A grant of the line not yet taken is on its waiter's session lease, which other records of
// the waiter's Store are on too: whatever another Store does with the grant (releases it,
// extends it with the same or another TTL, takes it by asking for it again, leaves for the same
// holder), that Store revokes none of the waiter's session.
func TestOtherStoresLeaveTheWaitersSessionAlone(t *testing.T) {
	t.Parallel()
	waiting, holding := newStore(t), newStore(t)
	ctx := t.Context()
	// x waits on a key of its own on waiting's session: its place is there while the session
	// lives.
	otherKey := uniqueKey(t)
	if res, err := holding.Acquire(ctx, req(otherKey, "o", 1, 1)); err != nil || !res.Granted {
		t.Fatalf("Acquire(o) = %+v, %v", res, err)
	}
	rx := req(otherKey, "x", 1, 1)
	rx.Wait = time.Minute
	if res, err := waiting.Acquire(ctx, rx); err != nil || res.Granted {
		t.Fatalf("Acquire(x) = %+v, %v; want refused, in line", res, err)
	}
	wx, err := waiting.Register(ctx, rx)
	if err != nil {
		t.Fatal(err)
	}
	defer wx.Close()

	rb := func(key string, ttl time.Duration) core.AcquireRequest {
		r := req(key, "b", 1, 1)
		r.TTL, r.Wait = ttl, time.Minute
		return r
	}
	for _, c := range []struct {
		name string
		do   func(t *testing.T, s *etcd.Store, key string, fence uint64)
	}{
		{"release", func(t *testing.T, s *etcd.Store, key string, fence uint64) {
			if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "b", Fence: fence}); err != nil || !ok {
				t.Fatalf("Release(b) = %v, %v", ok, err)
			}
		}},
		{"extend with its TTL", func(t *testing.T, s *etcd.Store, key string, fence uint64) {
			if res, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "b", TTL: time.Minute}); err != nil || res.Fence != fence {
				t.Fatalf("Extend(b) = %+v, %v", res, err)
			}
		}},
		{"extend with another TTL", func(t *testing.T, s *etcd.Store, key string, fence uint64) {
			if res, err := s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "b", TTL: 2 * time.Minute}); err != nil || res.Fence != fence {
				t.Fatalf("Extend(b) = %+v, %v", res, err)
			}
		}},
		{"take", func(t *testing.T, s *etcd.Store, key string, fence uint64) {
			if res, err := s.Acquire(ctx, rb(key, time.Minute)); err != nil || !res.Granted || res.Fence != fence {
				t.Fatalf("Acquire(b) = %+v, %v; want its grant, fence %d", res, err, fence)
			}
		}},
		{"waiter leaves", func(t *testing.T, s *etcd.Store, key string, fence uint64) {
			w, err := s.Register(ctx, rb(key, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := uniqueKey(t)
			third := newStore(t)
			if res, err := holding.Acquire(ctx, req(key, "a", 1, 1)); err != nil || !res.Granted {
				t.Fatalf("Acquire(a) = %+v, %v", res, err)
			}
			if res, err := waiting.Acquire(ctx, rb(key, time.Minute)); err != nil || res.Granted {
				t.Fatalf("Acquire(b) = %+v, %v; want refused, in line", res, err)
			}
			if ok, err := holding.Release(ctx, core.ReleaseRequest{Key: key, Holder: "a"}); err != nil || !ok {
				t.Fatalf("Release(a) = %v, %v", ok, err)
			}
			snap := poll.For(t, "b's grant of the line", func() (core.Snapshot, bool) {
				s, err := holding.Inspect(ctx, key)
				return s, err == nil && len(s.Leases) == 1 && s.Leases[0].Holder == "b"
			})
			if l := snap.Leases[0]; l.TTL <= 0 || l.TTL > time.Minute {
				t.Errorf("the untaken grant's TTL in Inspect = %v; want within its TTL", l.TTL)
			}
			c.do(t, third, key, snap.Leases[0].Fence)
			third.Close() // waits for the etcd leases it revokes
			if got := lineOf(t, holding, otherKey); len(got) != 1 || got[0] != "x" {
				t.Fatalf("x's place on the waiting Store's session, after another Store's %s of b's grant: line %v; want [x]", c.name, got)
			}
		})
	}
}
