package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/core"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// renewer renews the Store's etcd leases (a spare taken for a grant, a grant's at Extend) over
// one LeaseKeepAlive stream the Store keeps open: a renewal is one message each way on it, where
// clientv3's KeepAliveOnce opens and ends a stream per renewal, which costs the client and etcd
// more than the renewal itself. etcd answers a stream's renewals one by one, in order.
type renewer struct {
	lag time.Duration // renewLag when 0 (a test's own otherwise)

	mu     sync.Mutex
	closed bool
	cur    *renewStream
}

// renewStream is one LeaseKeepAlive stream and the renewals sent on it, unanswered, in order.
type renewStream struct {
	ready  chan struct{} // closed once open, or failed to open (err)
	stream etcdserverpb.Lease_LeaseKeepAliveClient
	err    error
	cancel context.CancelFunc

	mu    sync.Mutex
	queue []renewal
	ended error // why the stream ended; nil while it runs
}

// renewal is a renewal of lease id sent on a stream at at, answered on ch (buffered: a caller
// that stopped waiting is not waited for).
type renewal struct {
	id clientv3.LeaseID
	at time.Time
	ch chan renewed
}

// renewLag is how long etcd may leave the stream's oldest renewal unanswered before the next
// renewals go alone (KeepAliveOnce, a stream each) rather than queue behind it. etcd answers a
// stream's renewals one at a time and may hold one for long: a renewal of a lease past its TTL
// waits until etcd has revoked it (its lessor looks every 500 ms), a renewal when the leader's
// ticks lag (a busy machine) waits for a linearizable read, one of a lease it has not applied
// yet waits for the applied index (up to a second); every renewal behind it waits as long.
const renewLag = 100 * time.Millisecond

type renewed struct {
	ttl int64
	err error
}

// renew renews etcd lease id and returns the whole seconds it has left, or an error wrapping
// rpctypes.ErrLeaseNotFound when etcd no longer has it. A stream that ends before it answers
// (one opened before etcd restarted, say) is replaced and the renewal sent once more on the new
// one (renewing twice does no harm), while ctx lasts.
func (s *Store) renew(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	sent := time.Now()
	ttl, err := s.renewOnStream(ctx, id)
	if err == nil {
		s.spares.lived(id, sent, ttl)
	}
	return ttl, err
}

// renewOnStream is renew, without noting how long the lease lives.
func (s *Store) renewOnStream(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	for try := 0; ; try++ {
		rs, err := s.renewals.stream(s)
		if err != nil {
			return 0, err
		}
		if rs.lagging(cmp.Or(s.renewals.lag, renewLag)) {
			return s.renewAlone(ctx, id)
		}
		ttl, ended, err := rs.renew(ctx, id)
		if !ended || try == 1 || ctx.Err() != nil || s.ctx.Err() != nil {
			return ttl, err
		}
		s.renewals.drop(rs)
	}
}

// renewAlone renews lease id on a stream of its own (KeepAliveOnce), which ends with the Store's
// background work (Close, or the client's Close) as the Store's stream does.
func (s *Store) renewAlone(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	r, err := s.c.KeepAliveOnce(ctx, id)
	if err != nil {
		return 0, err
	}
	return r.TTL, nil
}

// lagging reports whether the oldest renewal sent on rs has waited for its answer longer than
// lag.
func (rs *renewStream) lagging(lag time.Duration) bool {
	select {
	case <-rs.ready:
	default:
		return false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.queue) > 0 && time.Since(rs.queue[0].at) > lag
}

// stream returns the Store's renewal stream, opening one (in the background, on the Store's
// context) when it has none: core.ErrClosed once the Store is closed.
func (r *renewer) stream(s *Store) (*renewStream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, core.ErrClosed
	}
	if r.cur != nil {
		return r.cur, nil
	}
	ctx, cancel := context.WithCancel(s.ctx)
	rs := &renewStream{ready: make(chan struct{}), cancel: cancel}
	r.cur = rs
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		defer cancel()
		rs.stream, rs.err = etcdserverpb.NewLeaseClient(s.c.ActiveConnection()).LeaseKeepAlive(ctx, grpc.WaitForReady(true))
		if rs.err != nil {
			rs.err = fmt.Errorf("open a lease renewal stream: %w", rpctypes.Error(rs.err))
			close(rs.ready)
			r.drop(rs)
			return
		}
		close(rs.ready)
		rs.receive()
		r.drop(rs)
	}()
	return rs, nil
}

// current returns the open (or opening) stream, nil when none.
func (r *renewer) current() *renewStream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// drop forgets rs, ended, so that the next renewal opens another stream.
func (r *renewer) drop(rs *renewStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == rs {
		r.cur = nil
	}
}

// close ends the current stream, and refuses streams from now on.
func (r *renewer) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.cur != nil {
		r.cur.cancel()
		r.cur = nil
	}
}

// renew sends a renewal of id on rs and waits for its answer, or for ctx. ended reports that rs
// ended (or never opened) before it answered.
func (rs *renewStream) renew(ctx context.Context, id clientv3.LeaseID) (ttl int64, ended bool, err error) {
	select {
	case <-rs.ready:
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
	if rs.err != nil {
		return 0, true, rs.err
	}
	ch, err := rs.send(id)
	if err != nil {
		return 0, true, err
	}
	return wait(ctx, ch)
}

// send sends a renewal of id on rs, open, and returns where its answer comes; an error when rs
// has ended.
func (rs *renewStream) send(id clientv3.LeaseID) (chan renewed, error) {
	ch := make(chan renewed, 1)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.ended != nil {
		return nil, rs.ended
	}
	rs.queue = append(rs.queue, renewal{id, time.Now(), ch})
	// A failed Send leaves the renewal queued: the stream's Recv then fails, and says why.
	_ = rs.stream.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: int64(id)})
	return ch, nil
}

// wait waits for the answer to a renewal sent, or for ctx. ended reports that its stream ended
// before it answered.
func wait(ctx context.Context, ch chan renewed) (ttl int64, ended bool, err error) {
	select {
	case a := <-ch:
		if a.err != nil && !errors.Is(a.err, rpctypes.ErrLeaseNotFound) {
			return 0, true, a.err
		}
		return a.ttl, false, a.err
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
}

// renewSoon sends a renewal of id now, when the Store's stream is open and answering, and returns
// a function that waits for it to be answered and returns renew's answer (sending it once more on
// another stream when this one ended first): so the renewal travels beside the caller's next
// request. With no stream open yet, or one lagging (see renewLag), it returns a function that
// renews then, as renew does.
func (s *Store) renewSoon(id clientv3.LeaseID) func(ctx context.Context) (int64, error) {
	later := func(ctx context.Context) (int64, error) { return s.renew(ctx, id) }
	rs, err := s.renewals.stream(s)
	if err != nil {
		return later
	}
	select {
	case <-rs.ready:
	default:
		return later
	}
	if rs.err != nil || rs.lagging(cmp.Or(s.renewals.lag, renewLag)) {
		return later
	}
	sent := time.Now()
	ch, err := rs.send(id)
	if err != nil {
		return later
	}
	return func(ctx context.Context) (int64, error) {
		ttl, ended, err := wait(ctx, ch)
		if ended && ctx.Err() == nil && s.ctx.Err() == nil {
			s.renewals.drop(rs)
			return s.renew(ctx, id)
		}
		if err == nil {
			s.spares.lived(id, sent, ttl)
		}
		return ttl, err
	}
}

// receive answers the stream's renewals in order until it ends, then fails those left.
func (rs *renewStream) receive() {
	for {
		resp, err := rs.stream.Recv()
		rs.mu.Lock()
		if err == nil && (len(rs.queue) == 0 || rs.queue[0].id != clientv3.LeaseID(resp.ID)) {
			err = fmt.Errorf("etcd answered a renewal of lease %x out of turn", resp.ID)
		}
		if err != nil {
			rs.ended = fmt.Errorf("lease renewal stream: %w", rpctypes.Error(err))
			q := rs.queue
			rs.queue = nil
			rs.mu.Unlock()
			rs.cancel()
			for _, w := range q {
				w.ch <- renewed{err: rs.ended}
			}
			return
		}
		w := rs.queue[0]
		rs.queue = rs.queue[1:]
		rs.mu.Unlock()
		if resp.TTL <= 0 {
			w.ch <- renewed{err: rpctypes.ErrLeaseNotFound}
		} else {
			w.ch <- renewed{ttl: resp.TTL}
		}
	}
}
