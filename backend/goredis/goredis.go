// Package goredis is the Leasehold store over a go-redis v9 client: a standalone *redis.Client,
// a *redis.ClusterClient, or a failover client — any redis.UniversalClient the caller already
// has. Every operation is one script call (one round trip); release wakes waiters through
// pub/sub on one subscription connection per Store. The scripts, key layout and wake-up logic
// are shared with backend/valkey (package redisdriver), so stores of both drivers on one server
// exclude each other.
//
// A Store is safe for concurrent use.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/redisdriver"
	"github.com/leasehold/leasehold/core"
)

var (
	acquireScript = redis.NewScript(redisdriver.AcquireScript)
	extendScript  = redis.NewScript(redisdriver.ExtendScript)
	releaseScript = redis.NewScript(redisdriver.ReleaseScript)
	inspectScript = redis.NewScript(redisdriver.InspectScript)
)

// Store is a core.Store and core.Notifier on Redis through go-redis. Make one with New.
type Store struct {
	client redis.UniversalClient
	layout redisdriver.Layout
	closed atomic.Bool

	mu     sync.Mutex // guards the lazily started subscription
	subs   *redisdriver.Subscriptions
	ps     *redis.PubSub
	cancel context.CancelFunc
	done   chan struct{}
}

var (
	_ core.Store    = (*Store)(nil)
	_ core.Notifier = (*Store)(nil)
)

// Option configures a Store.
type Option func(*options)

type options struct {
	prefix string
}

// WithPrefix sets the prefix of every Redis key and channel the Store uses (default
// "leasehold:"). It must not contain '{' or '}'.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// New returns a Store over client. It sends nothing until the first operation. The client
// stays the caller's: Close does not close it. A nil client is an error wrapping core.ErrInvalid.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil || (reflect.ValueOf(client).Kind() == reflect.Pointer && reflect.ValueOf(client).IsNil()) {
		return nil, fmt.Errorf("leasehold/goredis: new: %w: client: must not be nil", core.ErrInvalid)
	}
	o := options{prefix: redisdriver.DefaultPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	layout, err := redisdriver.NewLayout(o.prefix)
	if err != nil {
		return nil, fmt.Errorf("leasehold/goredis: new: %w", err)
	}
	return &Store{client: client, layout: layout}, nil
}

// run calls a script: one round trip (two the first time on a server, to load it).
func (s *Store) run(ctx context.Context, op, key string, script *redis.Script, args []any) (any, error) {
	if err := s.check(ctx); err != nil {
		return nil, fmt.Errorf("leasehold/goredis: %s %q: %w", op, key, err)
	}
	r, err := script.Run(ctx, s.client, s.layout.Keys(key), args...).Result()
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("leasehold/goredis: %s %q: %w", op, key, err)
	}
	return r, nil
}

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	return ctx.Err()
}

func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("leasehold/goredis: %s %q: %w", op, key, err)
}

// Acquire implements core.Store.Acquire in one round trip.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	r, err := s.run(ctx, "acquire", req.Key, acquireScript, redisdriver.AcquireArgs(req))
	if err != nil {
		return core.AcquireResult{}, err
	}
	res, err := redisdriver.ParseAcquire(r)
	return res, wrap("acquire", req.Key, err)
}

// Extend implements core.Store.Extend in one round trip.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	r, err := s.run(ctx, "extend", req.Key, extendScript, redisdriver.ExtendArgs(req))
	if err != nil {
		return core.ExtendResult{}, err
	}
	res, err := redisdriver.ParseExtend(r)
	return res, wrap("extend", req.Key, err)
}

// Release implements core.Store.Release in one round trip; the script publishes the freed
// permits, which wake waiters in every process subscribed to the key.
func (s *Store) Release(ctx context.Context, key, holder string) (bool, error) {
	r, err := s.run(ctx, "release", key, releaseScript, s.layout.ReleaseArgs(key, holder))
	if err != nil {
		return false, err
	}
	held, err := redisdriver.ParseRelease(r)
	return held, wrap("release", key, err)
}

// Inspect implements core.Store.Inspect in one round trip.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	r, err := s.run(ctx, "inspect", key, inspectScript, nil)
	if err != nil {
		return core.Snapshot{}, err
	}
	snap, err := redisdriver.ParseInspect(r)
	return snap, wrap("inspect", key, err)
}

// Register implements core.Notifier. The first call opens the Store's subscription connection;
// the first waiter on a key subscribes to its channel.
func (s *Store) Register(ctx context.Context, key string, permits int) (core.Waiter, error) {
	if err := s.check(ctx); err != nil {
		return nil, wrap("register", key, err)
	}
	w, err := s.subscriptions().Register(ctx, key, permits)
	return w, wrap("register", key, err)
}

func (s *Store) subscriptions() *redisdriver.Subscriptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.ps = s.client.Subscribe(context.Background())
		s.subs = redisdriver.NewSubscriptions(s.layout, pubsub{s.ps})
		var ctx context.Context
		ctx, s.cancel = context.WithCancel(context.Background())
		s.done = make(chan struct{})
		go s.listen(ctx, s.ps, s.subs)
	}
	return s.subs
}

type pubsub struct{ ps *redis.PubSub }

func (p pubsub) Subscribe(ctx context.Context, ch string) error   { return p.ps.Subscribe(ctx, ch) }
func (p pubsub) Unsubscribe(ctx context.Context, ch string) error { return p.ps.Unsubscribe(ctx, ch) }

// listen reads the subscription connection until the Store is closed. After an error go-redis
// reconnects and resubscribes on the next read; until the server confirms, waiters poll.
func (s *Store) listen(ctx context.Context, ps *redis.PubSub, subs *redisdriver.Subscriptions) {
	defer close(s.done)
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

// Close stops the Store's subscription connection and wakes its waiters; later operations
// return an error wrapping core.ErrClosed. The client is left open. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		return nil
	}
	s.subs.Close()
	s.cancel()
	err := s.ps.Close()
	<-s.done
	return err
}
