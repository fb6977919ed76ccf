package goredis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// batcher sends the script calls of concurrent callers together. A call made while fewer than
// maxInFlight sends are out goes at once, on its caller's goroutine, as one command; a call made
// while that many are out waits in a queue, and when a send ends, everything queued goes as one
// pipeline (at most maxBatch calls) on a goroutine of its own. So a lone caller pays nothing, and
// many callers on one client share round trips, system calls and the server's reads and writes.
// Safe for concurrent use.
type batcher struct {
	c redis.UniversalClient
	// honoursCtx says the client ends a call sent alone at its ctx's deadline (see driver): a
	// pipelined call whose ctx's deadline passes returns then too, its reply dropped.
	honoursCtx bool

	mu       sync.Mutex
	inFlight int
	queue    []*queued
}

// maxInFlight is how many sends (single calls or pipelines) a Store has out at once before calls
// queue: two, so that the server works on one while the reply of the other travels.
const maxInFlight = 2

// maxBatch is the most calls one pipeline carries; the rest wait for the next.
const maxBatch = 128

// queued is a call waiting in the queue, then in a pipeline.
type queued struct {
	cmd  *redis.Cmd
	done chan struct{} // closed when cmd has its reply or error
	// state is queuedWaiting until the pipeline takes the call (queuedSent) or its caller
	// gives up first (queuedLeft): a call whose caller left is not sent.
	state atomic.Int32
}

const (
	queuedWaiting int32 = iota
	queuedSent
	queuedLeft
)

// do sends cmd, alone or in a pipeline with others, and returns its reply once it has come, or
// ctx's error when ctx ends while it waits in the queue: such a call is never sent. A call that
// had left the queue in a pipeline when ctx ended waits for its reply, bounded by the client's
// timeouts, as a call sent alone on the caller's goroutine does: the reply says what the server
// did (a release that went through is one; see the package doc). Only on a client that honours
// ctx, whose lone call would end at the deadline, does a pipelined call whose deadline passes
// return ctx's error at once, its reply dropped (cmd is then the pipeline's until it ends).
func (b *batcher) do(ctx context.Context, cmd *redis.Cmd) (any, error) {
	b.mu.Lock()
	if b.inFlight < maxInFlight {
		b.inFlight++
		b.mu.Unlock()
		_ = b.c.Process(ctx, once{cmd})
		b.sent()
		return cmd.Result()
	}
	q := &queued{cmd: cmd, done: make(chan struct{})}
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	select {
	case <-q.done:
		return cmd.Result()
	case <-ctx.Done():
		if q.state.CompareAndSwap(queuedWaiting, queuedLeft) {
			return nil, ctx.Err()
		}
		if b.honoursCtx && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			select {
			case <-q.done: // its reply came as ctx ended
				return cmd.Result()
			default:
				return nil, ctx.Err()
			}
		}
		<-q.done
		return cmd.Result()
	}
}

// sent ends a send made on a caller's goroutine: when calls are queued, they go now, as one
// pipeline, on a goroutine of its own.
func (b *batcher) sent() {
	if batch := b.next(); batch != nil {
		go b.pipeline(batch)
	}
}

// next ends a send and returns the calls queued meanwhile (at most maxBatch), which the send's
// goroutine is to send next; nil when none are, and then the send is over.
func (b *batcher) next() []*queued {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.inFlight--
		return nil
	}
	n := min(len(b.queue), maxBatch)
	batch := b.queue[:n:n]
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	return batch
}

// pipeline sends the calls of batch whose callers still wait as one pipeline, bounded by the
// client's own timeouts (the callers' contexts are theirs: each returns when its own ends), then
// the calls queued meanwhile, until none are.
func (b *batcher) pipeline(batch []*queued) {
	for batch != nil {
		pipe := b.c.Pipeline()
		var taken []*queued
		for _, q := range batch {
			if q.state.CompareAndSwap(queuedWaiting, queuedSent) {
				pipe.Process(context.Background(), once{q.cmd})
				taken = append(taken, q)
			}
		}
		if len(taken) > 0 {
			_, _ = pipe.Exec(context.Background()) // each command keeps its own error
		}
		for _, q := range taken {
			close(q.done)
		}
		batch = b.next()
	}
}
