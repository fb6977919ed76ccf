// Package goredis is the Leasehold store over a go-redis v9 client: a standalone *redis.Client,
// a *redis.ClusterClient, or a failover client — any redis.UniversalClient the caller already
// has. Every operation is one script call (one round trip); a release grants the freed permits to
// the key's waiting line and tells the new holders' Stores through pub/sub, on one subscription
// connection per Store. The scripts, key layout and wake-up logic
// are shared with backend/valkey (package rediscore), so stores of both drivers on one server
// exclude each other.
//
// A Store is safe for concurrent use.
package goredis

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/core"
)

var scripts = func() (s [len(rediscore.Sources)]*redis.Script) {
	for i, src := range rediscore.Sources {
		s[i] = redis.NewScript(src)
	}
	return s
}()

// Store is a core.Store and core.Notifier on Redis through go-redis: Acquire, Extend, Release,
// Inspect, Register and Close come from the embedded rediscore.Base. Make one with New.
type Store struct {
	*rediscore.Base
}

var (
	_ core.Store    = (*Store)(nil)
	_ core.Notifier = (*Store)(nil)
)

// Option configures a Store.
type Option = rediscore.Option

// WithPrefix sets the prefix of every key and channel the Store uses (default "leasehold:").
// It must not contain '{' or '}'.
func WithPrefix(prefix string) Option { return rediscore.WithPrefix(prefix) }

// New returns a Store over client. It sends nothing until the first operation; the first
// waiter opens one subscription connection. The client stays the caller's: Close does not
// close it. A nil client is an error wrapping core.ErrInvalid.
//
// go-redis bounds a call by ctx's deadline only with ContextTimeoutEnabled (off by default);
// otherwise by its ReadTimeout, 3s unless set. So that every call returns by its ctx deadline
// either way, a Store over a client without ContextTimeoutEnabled runs each call whose ctx can
// end on a goroutine of its own and returns when ctx ends; the goroutine, and its pooled
// connection, are held until go-redis gives up (its ReadTimeout; never, if that is negative).
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	d := driver{c: client}
	switch c := client.(type) {
	case *redis.Client:
		d.honoursCtx = c != nil && c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		d.honoursCtx = c != nil && c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		d.honoursCtx = c != nil && c.Options().ContextTimeoutEnabled
	}
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		opts = append(opts[:len(opts):len(opts)], rediscore.WithClusterPubSub())
	}
	b, err := rediscore.NewBase("goredis", client, d, opts...)
	if err != nil {
		return nil, err
	}
	return &Store{b}, nil
}

// driver is the rediscore.Client over go-redis.
type driver struct {
	c          redis.UniversalClient
	honoursCtx bool // the client bounds calls by ctx's deadline itself
}

// Run uses go-redis's script helper: EVALSHA, and EVAL on NOSCRIPT. It returns when ctx ends.
func (d driver) Run(ctx context.Context, s rediscore.Script, keys []string, args []any) (any, error) {
	if d.honoursCtx || ctx.Done() == nil {
		return scripts[s].Run(ctx, d.c, keys, args...).Result()
	}
	type reply struct {
		v   any
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := scripts[s].Run(ctx, d.c, keys, args...).Result()
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Listen opens a PubSub and reads it until ctx ends. After an error go-redis reconnects and
// resubscribes on the next read; until the server confirms, waiters poll.
func (d driver) Listen(ctx context.Context, subs *rediscore.Subscriptions) (rediscore.PubSub, func()) {
	ps := d.c.Subscribe(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
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
	}()
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	return pubsub{ps}, func() {
		<-done
		stop()
		ps.Close()
	}
}

type pubsub struct{ ps *redis.PubSub }

func (p pubsub) Subscribe(ctx context.Context, ch string) error   { return p.ps.Subscribe(ctx, ch) }
func (p pubsub) Unsubscribe(ctx context.Context, ch string) error { return p.ps.Unsubscribe(ctx, ch) }
