package goredis

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
)

// adapter is the rediscore.Adapter over go-redis.
type adapter struct {
	c          redis.UniversalClient
	honoursCtx bool // the client bounds calls by ctx's deadline itself
	timesOut   bool // the client gives up on a call after its own read and write timeouts
	// batch sends concurrent calls together; nil when the client has no timeouts of its own
	// (a pipeline is bounded by them, not by its callers' contexts).
	batch *batcher
}

// newAdapter returns the adapter over client, reading its timeouts.
func newAdapter(client redis.UniversalClient) *adapter {
	a := &adapter{c: client}
	switch c := client.(type) {
	case *redis.Client:
		if c != nil {
			o := c.Options()
			a.honoursCtx, a.timesOut = o.ContextTimeoutEnabled, o.ReadTimeout > 0 && o.WriteTimeout > 0
		}
	case *redis.ClusterClient:
		if c != nil {
			o := c.Options()
			a.honoursCtx, a.timesOut = o.ContextTimeoutEnabled, o.ReadTimeout > 0 && o.WriteTimeout > 0
		}
	case *redis.Ring:
		if c != nil {
			// A Ring leaves its timeouts as given, and its shards' clients take 0 for their
			// defaults (5s to read; the read timeout to write), and a negative one for none.
			o := c.Options()
			a.honoursCtx, a.timesOut = o.ContextTimeoutEnabled, o.ReadTimeout >= 0 && o.WriteTimeout >= 0
		}
	}
	if a.timesOut {
		a.batch = &batcher{c: client, honoursCtx: a.honoursCtx}
	}
	return a
}

// Do implements rediscore.Adapter: c.Args sent once (see once), alone or in a pipeline with
// other callers' (see batcher). It returns by ctx's deadline; the package doc says how a call
// ends with a ctx without one.
func (a *adapter) Do(ctx context.Context, c rediscore.Call) (any, error) {
	if a.direct(ctx) {
		// A reply that came after ctx ended is returned as it is: it says what the server did
		// (a release that went through is one), which the Store's operations judge.
		return a.send(ctx, c)
	}
	type reply struct {
		v   any
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := a.send(ctx, c)
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// direct says a call on ctx runs on the caller's goroutine: the client ends it by ctx's deadline
// itself, or ctx has no deadline and the client's own timeouts end it (see the package doc).
func (a *adapter) direct(ctx context.Context) bool {
	if a.honoursCtx || ctx.Done() == nil {
		return true
	}
	_, ok := ctx.Deadline()
	return !ok && a.timesOut
}

// send sends c.Args once: go-redis would send it again after a read timeout or a connection
// broken once it was written (its MaxRetries), when the server may have run it already, and the
// second run's reply would stand for the first's (a release that went through would report the
// lease gone; see once).
func (a *adapter) send(ctx context.Context, c rediscore.Call) (any, error) {
	cmd := redis.NewCmd(ctx, c.Args...)
	if c.Keys > 0 {
		cmd.SetFirstKeyPos(rediscore.Head)
	}
	if a.batch != nil {
		return a.batch.do(ctx, cmd)
	}
	_ = a.c.Process(ctx, once{cmd})
	return cmd.Result()
}

// once is a script call that go-redis sends at most once: NoRetry keeps it from running the
// command again after an error that may have come after the server ran it (a read timeout, a
// connection broken after the write), in a pipeline too. The reply that did not come is then an
// error, which the Store and the portable layer treat as a reply lost (a Release that finds
// nothing after one whose reply was lost reports the lease released, not lost).
type once struct{ *redis.Cmd }

// NoRetry implements redis.Cmder: never sent again once it may have reached the server.
func (once) NoRetry() bool { return true }

// Unsent implements rediscore.Adapter: a failed dial, or no connection free in the pool in time.
func (a *adapter) Unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout)
}

// LoadLibrary implements rediscore.Adapter: FUNCTION LOAD on the server, every primary of a
// Cluster, or every shard of a Ring.
func (a *adapter) LoadLibrary(ctx context.Context, library string) []error {
	var (
		mu   sync.Mutex
		errs []error
	)
	load := func(ctx context.Context, c *redis.Client) error {
		err := c.FunctionLoad(ctx, library).Err()
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := a.c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, load)
	case *redis.Ring:
		err = c.ForEachShard(ctx, load)
	default:
		err = a.c.FunctionLoad(ctx, library).Err()
	}
	return append(errs, err)
}

// ErrorReply implements rediscore.Adapter.
func (a *adapter) ErrorReply(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		return re.Error(), true
	}
	return "", false
}

// Listen implements rediscore.Adapter: a PubSub read until ctx ends. After an error go-redis
// reconnects and resubscribes on the next read; until the server confirms, waiters poll.
func (a *adapter) Listen(ctx context.Context, subs rediscore.Listener) (rediscore.PubSub, func()) {
	if _, ok := a.c.(*redis.Ring); ok {
		// A Ring subscribes on the shard of the first channel named (and panics with none), and
		// a PUBLISH reaches the subscribers of its own shard only: no one connection hears every
		// key. Nothing is subscribed; the Store's waiters and watches, never confirmed, poll.
		return noPubSub{}, func() {}
	}
	ps := a.c.Subscribe(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		receive(ctx, ps, subs)
	}()
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	return pubsub{ps}, func() {
		<-done
		stop()
		ps.Close()
	}
}

// receive reports what ps receives to subs until ctx ends, reporting Down after each error.
func receive(ctx context.Context, ps *redis.PubSub, subs rediscore.Listener) {
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			subs.Down()
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				subs.Confirmed(m.Channel)
			}
		case *redis.Message:
			subs.Message(m.Channel, m.Payload)
		}
	}
}

type pubsub struct{ ps *redis.PubSub }

// noPubSub is the PubSub of a Ring: it subscribes to nothing.
type noPubSub struct{}

func (noPubSub) Subscribe(context.Context, string) error   { return nil }
func (noPubSub) Unsubscribe(context.Context, string) error { return nil }

func (p pubsub) Subscribe(ctx context.Context, ch string) error   { return p.ps.Subscribe(ctx, ch) }
func (p pubsub) Unsubscribe(ctx context.Context, ch string) error { return p.ps.Unsubscribe(ctx, ch) }
