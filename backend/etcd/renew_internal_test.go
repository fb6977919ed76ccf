package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func renewTestStore(t *testing.T) (*Store, *clientv3.Client) {
	t.Helper()
	c := etcdtest.Shared(t).Client(t)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}

func newEtcdLease(t *testing.T, c *clientv3.Client, secs int64) clientv3.LeaseID {
	t.Helper()
	g, err := c.Grant(t.Context(), secs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c.Revoke(ctx, g.ID)
	})
	return g.ID
}

// TestRenewalsShareOneStream: renewals, one after another and many at once, go on one
// LeaseKeepAlive stream, each renewing its own lease to its full TTL.
func TestRenewalsShareOneStream(t *testing.T) {
	t.Parallel()
	s, c := renewTestStore(t)
	ctx := t.Context()
	a, b := newEtcdLease(t, c, 30), newEtcdLease(t, c, 60)
	if ttl, err := s.renew(ctx, a); err != nil || ttl != 30 {
		t.Fatalf("renew(a) = %d, %v; want 30", ttl, err)
	}
	first := s.renewals.current()
	errs := make(chan error, 40)
	for i := range 40 {
		go func() {
			id, want := a, int64(30)
			if i%2 == 1 {
				id, want = b, 60
			}
			ttl, err := s.renew(ctx, id)
			if err == nil && ttl != want {
				err = errors.New("renewed to another TTL")
			}
			errs <- err
		}()
	}
	for range 40 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s.renewals.current() != first {
		t.Error("the renewals opened another stream")
	}
}

// TestRenewalOfAnEndedLeaseSaysSoAndKeepsTheStream: etcd answers a renewal of a lease it does not
// have with no TTL: renew reports rpctypes.ErrLeaseNotFound, and the stream serves the next.
func TestRenewalOfAnEndedLeaseSaysSoAndKeepsTheStream(t *testing.T) {
	t.Parallel()
	s, c := renewTestStore(t)
	ctx := t.Context()
	gone := newEtcdLease(t, c, 30)
	if _, err := c.Revoke(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := s.renew(ctx, gone); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("renew of a revoked lease: %v; want ErrLeaseNotFound", err)
	}
	first := s.renewals.current()
	if ttl, err := s.renew(ctx, newEtcdLease(t, c, 30)); err != nil || ttl != 30 {
		t.Fatalf("renew after = %d, %v", ttl, err)
	}
	if s.renewals.current() != first {
		t.Error("an answer of lease not found ended the stream")
	}
}

// TestRenewalOnABrokenStreamIsSentAgain: a stream that ends with a renewal unanswered (cut, or
// opened before etcd restarted) is replaced, and the renewal answered on the new one.
func TestRenewalOnABrokenStreamIsSentAgain(t *testing.T) {
	t.Parallel()
	s, c := renewTestStore(t)
	ctx := t.Context()
	id := newEtcdLease(t, c, 30)
	if _, err := s.renew(ctx, id); err != nil {
		t.Fatal(err)
	}
	broken := s.renewals.current()
	broken.cancel()
	poll.Until(t, "the stream to end", func() bool {
		broken.mu.Lock()
		defer broken.mu.Unlock()
		return broken.ended != nil
	})
	// As a stream whose end the renewer has not seen yet: the renewal finds it ended.
	s.renewals.mu.Lock()
	s.renewals.cur = broken
	s.renewals.mu.Unlock()
	if ttl, err := s.renew(ctx, id); err != nil || ttl != 30 {
		t.Fatalf("renew on a broken stream = %d, %v; want it renewed on another", ttl, err)
	}
	if s.renewals.current() == broken || s.renewals.current() == nil {
		t.Error("the broken stream was kept")
	}
}

// TestRenewalWaitsNoLongerThanItsContext: with etcd not answering (the stream not open yet, its
// server out of reach), a renewal returns its ctx's error at its deadline; the Store's Close
// ends the stream's opening and returns within a second.
func TestRenewalWaitsNoLongerThanItsContext(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	id := newEtcdLease(t, c, 30)
	srv.Kill(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.renew(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("renew with etcd gone: %v; want its deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("renew took %v past a 200ms deadline", d)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the stream's opening")
	}
	if _, err := s.renew(t.Context(), id); !errors.Is(err, core.ErrClosed) {
		t.Errorf("renew after Close: %v; want ErrClosed", err)
	}
}
