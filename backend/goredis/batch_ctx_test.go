package goredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// TestCallWhoseCtxEndsInTheQueueIsNotSent: a caller whose ctx ends while its call waits in the
// queue gets ctx's error at once, and its call never reaches the server.
func TestCallWhoseCtxEndsInTheQueueIsNotSent(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	h := &gateHook{gate: make(chan struct{})}
	s := gatedStore(t, srv, h)
	ctx := context.Background()

	done := make(chan error, 2)
	for _, key := range []string{"a", "b"} {
		go func() {
			_, err := s.Acquire(ctx, acquireReq(key, "h"))
			done <- err
		}()
	}
	poll.Until(t, "two calls held at the gate", func() bool { return h.heldCalls() == 2 })
	qctx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := s.Acquire(qctx, acquireReq("queued", "h"))
		left <- err
	}()
	poll.Until(t, "a call queued", func() bool { return goredis.Queued(s) == 1 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued acquire: %v; want context.Canceled while the gate is still shut", err)
	}
	close(h.gate)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// The try left the queue unsent: nothing of it reached the server (the leave its Store sends
	// after a failed try that could have been granted finds nothing).
	snap, err := s.Inspect(ctx, "queued")
	if err != nil || len(snap.Leases) != 0 || len(snap.Waiters) != 0 {
		t.Fatalf("queued key: %+v, %v; want nothing", snap, err)
	}
	if sizes := h.sizes(); len(sizes) != 0 {
		t.Fatalf("pipelines of %v calls; want none: the only queued call left", sizes)
	}
}

// TestCallWhoseCtxEndsInAPipelineWaitsForItsReply: a Release whose ctx ends after its call left
// the queue in a pipeline waits for the reply, as a call sent alone does on a client that runs it
// on the caller's goroutine (bounded by the client's timeouts): the reply says the server
// released the lease, and Release returns true and no error.
func TestCallWhoseCtxEndsInAPipelineWaitsForItsReply(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	h := &gateHook{gate: make(chan struct{}), pipes: make(chan struct{})}
	s, _, cancel, left, done := releaseQueuedBehindTwo(t, srv, h, "piped")
	defer cancel()
	ctx := context.Background()
	close(h.gate)
	poll.Until(t, "the queued call in a pipeline", func() bool { return len(h.sizes()) == 1 })
	cancel()
	close(h.pipes)
	if a := <-left; !a.held || a.err != nil {
		t.Fatalf("release canceled in a pipeline: %v, %v; want true, nil (the server released it)", a.held, a.err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if snap, err := s.Inspect(ctx, "piped"); err != nil || len(snap.Leases) != 0 {
		t.Fatalf("piped key: %+v, %v; want no lease", snap, err)
	}
}

// deadlineCtx is a ctx with a far deadline that the test makes pass when it closes done.
type deadlineCtx struct {
	context.Context
	done chan struct{}
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }
func (c deadlineCtx) Done() <-chan struct{}       { return c.done }
func (c deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestPipelinedCallEndsAtItsDeadlineWhenTheClientHonoursCtx: with ContextTimeoutEnabled a call
// sent alone ends at its ctx's deadline; so does one in a pipeline whose reply has not come, with
// ctx's error.
func TestPipelinedCallEndsAtItsDeadlineWhenTheClientHonoursCtx(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	h := &gateHook{gate: make(chan struct{}), pipes: make(chan struct{})}
	s := gatedStoreWith(t, srv, h, redis.Options{ContextTimeoutEnabled: true})
	ctx := context.Background()
	done := make(chan error, 2)
	for _, key := range []string{"a", "b"} {
		go func() {
			_, err := s.Acquire(ctx, acquireReq(key, "h"))
			done <- err
		}()
	}
	poll.Until(t, "two calls held at the gate", func() bool { return h.heldCalls() == 2 })
	qctx := deadlineCtx{Context: ctx, done: make(chan struct{})}
	left := make(chan error, 1)
	go func() {
		_, err := s.Extend(qctx, core.ExtendRequest{Key: "k", Holder: "h", TTL: time.Minute})
		left <- err
	}()
	poll.Until(t, "a call queued", func() bool { return goredis.Queued(s) == 1 })
	close(h.gate)
	poll.Until(t, "the queued call in a pipeline", func() bool { return len(h.sizes()) == 1 })
	close(qctx.done) // its deadline passes while the pipeline is held
	err := poll.For(t, "the pipelined extend to return at its deadline", func() (error, bool) {
		select {
		case err := <-left:
			return err, true
		default:
			return nil, false
		}
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("pipelined extend past its deadline: %v; want context.DeadlineExceeded", err)
	}
	close(h.pipes)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCallWhoseCtxEndsInTheQueueReturnsCtxError: a Release whose ctx ends while its call waits in
// the queue returns ctx's error (the call was never sent), not an unreadable reply; the lease is
// still held, and a later Release frees it.
func TestCallWhoseCtxEndsInTheQueueReturnsCtxError(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	h := &gateHook{gate: make(chan struct{})}
	s, fence, cancel, left, done := releaseQueuedBehindTwo(t, srv, h, "queued")
	defer cancel()
	ctx := context.Background()
	cancel()
	if a := <-left; a.held || !errors.Is(a.err, context.Canceled) {
		t.Fatalf("queued release: %v, %v; want false, context.Canceled", a.held, a.err)
	}
	close(h.gate)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if held, err := s.Release(ctx, core.ReleaseRequest{Key: "queued", Holder: "h", Fence: fence}); !held || err != nil {
		t.Fatalf("release after the canceled one: %v, %v; want the lease still held, and freed", held, err)
	}
}

// releaseAnswer is what a Release returned.
type releaseAnswer struct {
	held bool
	err  error
}

// releaseQueuedBehindTwo has h's gate hold two calls of a Store over srv, then queues behind them
// a Release (under a ctx that cancel ends) of key's lease, granted to "h" at fence by another
// Store; its answer comes on left, the two held calls' errors on done once the gate opens.
func releaseQueuedBehindTwo(t *testing.T, srv *redistest.Server, h *gateHook, key string) (s *goredis.Store, fence uint64, cancel context.CancelFunc, left <-chan releaseAnswer, done <-chan error) {
	t.Helper()
	s = gatedStore(t, srv, h)
	ctx := context.Background()
	res, err := plainStore(t, srv).Acquire(ctx, acquireReq(key, "h"))
	if err != nil || !res.Granted {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	held := make(chan error, 2)
	for _, k := range []string{"a", "b"} {
		go func() {
			_, err := s.Acquire(ctx, acquireReq(k, "h"))
			held <- err
		}()
	}
	poll.Until(t, "two calls held at the gate", func() bool { return h.heldCalls() == 2 })
	qctx, cancel := context.WithCancel(ctx)
	answers := make(chan releaseAnswer, 1)
	go func() {
		ok, err := s.Release(qctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence})
		answers <- releaseAnswer{ok, err}
	}()
	poll.Until(t, "a call queued", func() bool { return goredis.Queued(s) == 1 })
	return s, res.Fence, cancel, answers, held
}
