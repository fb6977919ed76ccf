package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/etcd/internal/etcdtest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// The renewal stream with etcd paused (its renewals sent, unanswered) and the stream cut with
// renewals queued on it. Each test pauses a server of its own, and none is parallel (as in
// faults_test.go): they bound how late calls return.

// pausedRenewals returns a Store on a server of its own, and the server. Its renewals queue on
// its stream however long etcd leaves those before them unanswered.
func pausedRenewals(t *testing.T) (*Store, *etcdtest.Server) {
	t.Helper()
	srv := etcdtest.Start(t)
	s, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	s.renewals.lag = time.Hour // renewals queue behind those etcd has not answered
	t.Cleanup(func() { s.Close() })
	return s, srv
}

// queued returns how many renewals rs has sent that etcd has not answered.
func (rs *renewStream) queued() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.queue)
}

// TestRenewalsAbandonedByTheirCallersLeaveTheOthersTheirOwnAnswers: renewals whose callers
// stopped waiting (their ctx ended with etcd paused) stay queued on the stream, so that the
// answers etcd sends once it resumes go each to its own renewal: the renewals after them, of
// leases of other TTLs, are answered with their own lease's TTL, on the same stream.
func TestRenewalsAbandonedByTheirCallersLeaveTheOthersTheirOwnAnswers(t *testing.T) {
	s, srv := pausedRenewals(t)
	c := srv.Client(t)
	short, long := newEtcdLease(t, c, 20), newEtcdLease(t, c, 50)
	if ttl, err := s.renew(t.Context(), short); err != nil || ttl != 20 {
		t.Fatalf("renew = %d, %v; want 20", ttl, err)
	}
	rs := s.renewals.current()
	srv.Pause(t)
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		if _, err := s.renew(ctx, short); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("renew with etcd paused: %v; want its deadline", err)
		}
		cancel()
	}
	if n := rs.queued(); n != 3 {
		t.Fatalf("%d renewals queued; want the 3 abandoned", n)
	}
	type answer struct {
		ttl int64
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		ttl, err := s.renew(t.Context(), long)
		answers <- answer{ttl, err}
	}()
	poll.Until(t, "the renewal queued behind the abandoned ones", func() bool { return rs.queued() == 4 })
	srv.Resume(t)
	if a := <-answers; a.err != nil || a.ttl != 50 {
		t.Fatalf("renew of the 50s lease behind abandoned renewals of a 20s one = %d, %v; want 50", a.ttl, a.err)
	}
	if ttl, err := s.renew(t.Context(), short); err != nil || ttl != 20 {
		t.Fatalf("renew after = %d, %v; want 20", ttl, err)
	}
	if s.renewals.current() != rs {
		t.Error("the stream was replaced")
	}
}

// TestRenewalsQueuedOnACutStreamAreAnsweredOnTheNext: renewals sent on a stream that ends before
// etcd answers them (cut while etcd is paused) are each sent once more on a new stream, and
// answered there with their own lease's TTL.
func TestRenewalsQueuedOnACutStreamAreAnsweredOnTheNext(t *testing.T) {
	s, srv := pausedRenewals(t)
	c := srv.Client(t)
	ids := []int64{20, 30, 40, 50}
	leases := make([]renewable, len(ids))
	for i, secs := range ids {
		leases[i] = renewable{newEtcdLease(t, c, secs), secs}
	}
	if _, err := s.renew(t.Context(), leases[0].id); err != nil {
		t.Fatal(err)
	}
	cut := s.renewals.current()
	srv.Pause(t)
	errs := make(chan error, len(leases))
	for _, l := range leases {
		go func() {
			ttl, err := s.renew(t.Context(), l.id)
			if err == nil && ttl != l.secs {
				err = errors.New("a renewal answered with another lease's TTL")
			}
			errs <- err
		}()
	}
	poll.Until(t, "the renewals queued on the stream", func() bool { return cut.queued() == len(leases) })
	cut.cancel()
	poll.Until(t, "another stream opening", func() bool {
		cur := s.renewals.current()
		return cur != nil && cur != cut
	})
	srv.Resume(t)
	for range leases {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestCloseEndsARenewalStreamEtcdDoesNotAnswer: with etcd paused and a renewal waiting on the
// stream, the renewal returns at its caller's deadline, Close returns within its bound of a
// second or so, the renewal then waiting returns core.ErrClosed or the stream's end, and no
// goroutine of the Store's is left.
func TestCloseEndsARenewalStreamEtcdDoesNotAnswer(t *testing.T) {
	srv := etcdtest.Start(t)
	ignore := goleak.IgnoreCurrent()
	c := srv.Client(t)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	s.renewals.lag = time.Hour // the second renewal queues behind the first
	id := newEtcdLease(t, c, 30)
	if _, err := s.renew(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	rs := s.renewals.current()
	srv.Pause(t)
	defer srv.Resume(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.renew(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("renew with etcd paused: %v; want its deadline", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("renew returned %v after its 100ms deadline", d)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := s.renew(t.Context(), id)
		waiting <- err
	}()
	poll.Until(t, "the second renewal queued", func() bool { return rs.queued() == 2 })
	start = time.Now()
	s.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v with etcd paused", d)
	}
	if err := <-waiting; err == nil {
		t.Error("a renewal etcd never answered returned no error after Close")
	}
	if _, err := s.renew(t.Context(), id); !errors.Is(err, core.ErrClosed) {
		t.Errorf("renew after Close: %v; want ErrClosed", err)
	}
	if s.renewals.current() != nil {
		t.Error("a stream opened after Close")
	}
	c.Close()
	goleak.VerifyNone(t, ignore)
}

type renewable struct {
	id   clientv3.LeaseID
	secs int64
}

// stuckStream is a LeaseKeepAlive stream etcd no longer answers on (holding a renewal, say, of
// a lease past its TTL until it revokes it): what is sent on it waits, until its ctx ends.
type stuckStream struct {
	etcdserverpb.Lease_LeaseKeepAliveClient
	ctx context.Context
}

func (s stuckStream) Send(*etcdserverpb.LeaseKeepAliveRequest) error { return nil }

func (s stuckStream) Recv() (*etcdserverpb.LeaseKeepAliveResponse, error) {
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

// TestRenewalsDoNotQueueBehindOneEtcdHolds: while etcd holds the stream's oldest renewal
// unanswered (longer than renewLag), a renewal is sent on a stream of its own and answered
// there with its lease's TTL, in time, rather than queued behind it.
func TestRenewalsDoNotQueueBehindOneEtcdHolds(t *testing.T) {
	t.Parallel()
	s, c := renewTestStore(t)
	id := newEtcdLease(t, c, 30)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	held := &renewStream{ready: make(chan struct{}), stream: stuckStream{ctx: ctx}, cancel: cancel}
	close(held.ready)
	held.queue = []renewal{{id: id, at: time.Now().Add(-time.Second), ch: make(chan renewed, 1)}}
	s.renewals.mu.Lock()
	s.renewals.cur = held
	s.renewals.mu.Unlock()
	rctx, rcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer rcancel()
	if ttl, err := s.renew(rctx, id); err != nil || ttl != 30 {
		t.Fatalf("renew with the stream's oldest renewal held for a second = %d, %v; want 30", ttl, err)
	}
	if n := held.queued(); n != 1 {
		t.Errorf("%d renewals queued on the held stream; want only the one held", n)
	}
}
