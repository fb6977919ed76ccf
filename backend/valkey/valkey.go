// Package valkey is the Leasehold store over a valkey-go client (github.com/valkey-io/valkey-go),
// standalone or cluster, as the caller built it. Every operation is one script call (one round
// trip); a release grants the freed permits to the key's waiting line and tells the new holders'
// Stores through pub/sub, on one dedicated subscription connection per Store, resubscribed after
// a reconnect. The scripts, key layout and wake-up logic are shared
// with backend/goredis (package rediscore), so stores of both drivers on one server exclude
// each other.
//
// Client-side caching plays no part; a client built with DisableCache works as well.
// A Store is safe for concurrent use.
package valkey

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/core"
)

var scripts = func() (s [len(rediscore.Sources)]*vk.Lua) {
	for i, src := range rediscore.Sources {
		s[i] = vk.NewLuaScript(src)
	}
	return s
}()

// Store is a core.Store and core.Notifier on Redis or Valkey through valkey-go: Acquire,
// Extend, Release, Inspect, Register and Close come from the embedded rediscore.Base. Make
// one with New.
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
// waiter opens one dedicated subscription connection. The client stays the caller's: Close
// does not close it. A nil client is an error wrapping core.ErrInvalid.
func New(client vk.Client, opts ...Option) (*Store, error) {
	if client != nil && client.Mode() == vk.ClientModeCluster {
		opts = append(opts[:len(opts):len(opts)], rediscore.WithClusterPubSub())
	}
	b, err := rediscore.NewBase("valkey", client, driver{client}, opts...)
	if err != nil {
		return nil, err
	}
	return &Store{b}, nil
}

// driver is the rediscore.Client over valkey-go.
type driver struct {
	c vk.Client
}

// Run uses valkey-go's script helper: EVALSHA, and EVAL on NOSCRIPT.
func (d driver) Run(ctx context.Context, s rediscore.Script, keys []string, args []any) (any, error) {
	strs := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			strs[i] = v
		case int:
			strs[i] = strconv.Itoa(v)
		case int64:
			strs[i] = strconv.FormatInt(v, 10)
		default:
			strs[i] = fmt.Sprint(v)
		}
	}
	return scripts[s].Exec(ctx, d.c, keys, strs).ToAny()
}

// Listen keeps one dedicated connection with pub/sub hooks; when it breaks, it reports Down,
// takes a new one and subscribes again to every channel that has waiters.
func (d driver) Listen(ctx context.Context, subs *rediscore.Subscriptions) (rediscore.PubSub, func()) {
	ps := &pubsub{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := 10 * time.Millisecond
		for ctx.Err() == nil {
			dc, release := d.c.Dedicate()
			broken := dc.SetPubSubHooks(vk.PubSubHooks{
				OnMessage: func(m vk.PubSubMessage) { subs.Message(m.Channel, m.Message) },
				OnSubscription: func(s vk.PubSubSubscription) {
					if s.Kind == "subscribe" {
						subs.Confirmed(s.Channel)
					}
				},
			})
			ps.set(dc)
			if chs := subs.Channels(); len(chs) > 0 {
				dc.Do(ctx, dc.B().Subscribe().Channel(chs...).Build())
			}
			select {
			case <-ctx.Done():
			case <-broken:
				subs.Down()
			}
			ps.set(nil)
			release()
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			backoff = min(2*backoff, time.Second)
		}
	}()
	return ps, func() { <-done }
}

// pubsub sends on the current dedicated connection; while there is none, a subscription waits
// for the next connection, which subscribes to every channel with waiters.
type pubsub struct {
	mu sync.Mutex
	dc vk.DedicatedClient
}

func (p *pubsub) set(dc vk.DedicatedClient) {
	p.mu.Lock()
	p.dc = dc
	p.mu.Unlock()
}

func (p *pubsub) send(ctx context.Context, build func(vk.DedicatedClient) vk.Completed) error {
	p.mu.Lock()
	dc := p.dc
	p.mu.Unlock()
	if dc == nil {
		return nil
	}
	return dc.Do(ctx, build(dc)).Error()
}

func (p *pubsub) Subscribe(ctx context.Context, ch string) error {
	return p.send(ctx, func(dc vk.DedicatedClient) vk.Completed { return dc.B().Subscribe().Channel(ch).Build() })
}

func (p *pubsub) Unsubscribe(ctx context.Context, ch string) error {
	return p.send(ctx, func(dc vk.DedicatedClient) vk.Completed { return dc.B().Unsubscribe().Channel(ch).Build() })
}
