// Package goredis is the Leasehold store over a go-redis v9 client: a standalone *redis.Client,
// a *redis.ClusterClient, or a failover client — any redis.UniversalClient the caller already
// has. Every operation is one script call (one round trip); a release grants the freed permits to
// the key's waiting line and tells the new holders' Stores through pub/sub, on one subscription
// connection per Store. The scripts, key layout and wake-up logic are shared with backend/valkey,
// so stores of both drivers on one server exclude and wake each other.
//
// Errors of the server or the network start with "goredis: ", then go-redis's; a sentinel of
// package core (core.ErrClosed, core.ErrLost, core.ErrInvalid) or the caller's ctx error is
// returned as it is, or with a detail after it; so is the *core.LimitMismatchError of a request
// whose limit is not the key's (that of its leases, or of its waiters when it has none), which
// was refused at once and wrote nothing. The portable layer (package primitives) names the
// operation and the key.
//
// A key nobody holds, waits for or watches leaves no Redis key after its last release, unless
// a Redlock node raised its fence above the server's clock, and then only until the clock
// passes it; one whose holders and waiters died goes after a bound set by their TTLs, not by
// their waits. docs/redis-keys.md gives the bounds and the figures.
//
// A Store is safe for concurrent use.
package goredis

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/core"
)

// Store is a core.Store, core.Notifier, core.Watcher and core.FenceRaiser on Redis through
// go-redis. Make one with New; its methods are safe for concurrent use.
type Store struct {
	rs *rediscore.Store
}

var (
	_ core.Store       = (*Store)(nil)
	_ core.Notifier    = (*Store)(nil)
	_ core.FenceRaiser = (*Store)(nil)
	_ core.Watcher     = (*Store)(nil)
)

// Option configures a Store.
type Option func(*options)

type options struct{ shared []rediscore.Option }

// WithPrefix sets the prefix of every key and channel the Store uses (default "leasehold:").
// It must not contain '{' or '}'.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.shared = append(o.shared, rediscore.WithPrefix(prefix)) }
}

// New returns a Store over client. It sends nothing until the first operation; the first
// waiter opens one subscription connection. The client stays the caller's: Close does not
// close it. A nil client, or a prefix with a brace, is an error wrapping core.ErrInvalid. Over a
// *redis.Ring, which has no connection that hears every shard's messages, the Store subscribes to
// nothing: its waiters and watches are never Reliable, and poll.
//
// go-redis bounds a call by ctx's deadline only with ContextTimeoutEnabled (off by default);
// otherwise by its ReadTimeout, and it ends no call when ctx is canceled. So that every call
// returns by its ctx deadline either way, a Store over a client without ContextTimeoutEnabled
// runs each call whose ctx has a deadline on a goroutine of its own and returns when ctx ends;
// the goroutine, and its pooled connection, are held until go-redis gives up (its ReadTimeout;
// never, if that is negative). A call whose ctx has no deadline runs on the caller's goroutine,
// as go-redis's own commands do, when the client has read and write timeouts: canceling ctx
// then ends the call when its reply comes, or when go-redis gives up on a server that does not
// answer (its timeouts and retries), and the call returns what the reply says (the Store's
// Acquire reports ctx's error then, as when ctx ends before the reply on the other path, and
// gives back what the try took). That spares the common call a goroutine and two wake-ups,
// about a tenth of an uncontended Mutex pair's time. Without those timeouts, such a call too
// runs on its own goroutine and returns when ctx ends. The waits between calls (for a grant, a
// retry, a refresh) always end when ctx does.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	d := &driver{c: client, fn: new(rediscore.Functions)}
	switch c := client.(type) {
	case *redis.Client:
		if c != nil {
			o := c.Options()
			d.honoursCtx, d.timesOut = o.ContextTimeoutEnabled, o.ReadTimeout > 0 && o.WriteTimeout > 0
		}
	case *redis.ClusterClient:
		if c != nil {
			o := c.Options()
			d.honoursCtx, d.timesOut = o.ContextTimeoutEnabled, o.ReadTimeout > 0 && o.WriteTimeout > 0
		}
	case *redis.Ring:
		if c != nil {
			// A Ring leaves its timeouts as given, and its shards' clients take 0 for their
			// defaults (5s to read; the read timeout to write), and a negative one for none.
			o := c.Options()
			d.honoursCtx, d.timesOut = o.ContextTimeoutEnabled, o.ReadTimeout >= 0 && o.WriteTimeout >= 0
		}
	}
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		o.shared = append(o.shared, rediscore.WithClusterPubSub())
	}
	rs, err := rediscore.New("goredis", client, d, o.shared...)
	if err != nil {
		return nil, err
	}
	return &Store{rs: rs}, nil
}

// Acquire implements core.Store: one script call (FCALL, or EVALSHA; see package rediscore). It grants the
// request when the permits are free and nobody waits in the key's line, or renews the holder's
// lease; otherwise it refuses and says when, by expiry alone, there would be room. A refusal
// with req.Wait > 0 keeps the holder's place in the line, strictly FIFO, for req.Wait: a release
// grants it the lease there, and its next Acquire takes it: from the grant's message, with no
// command, when its holder id is unshared and it waited under half its TTL (AcquireResult.TTL is then what is left of the TTL
// counted from its refused try), else with one call that renews it for its full TTL. A try that
// fails in flight (one that would wait; one that would not, of an unshared holder under a ctx
// that can end) is followed by a leave, sent in the background, which keeps it from taking a
// place or a lease should it still reach the server. Every grant, new
// or renewed, keeps req.Value with the lease, in the lease's own entry (no key or command more),
// and a grant the line makes carries the waiter's value.
func (s *Store) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	return s.rs.Acquire(ctx, req)
}

// AcquireAbove implements core.FenceRaiser, for a Store that is a Redlock node: Acquire, where a
// new grant's fence (one the key's line makes later included) is at least floor, and the key's
// counter with it; a lease the holder holds keeps its fence. One script call. A floor above
// 2^53 − 2^32, which the scripts' doubles cannot count exactly, is core.ErrInvalid.
func (s *Store) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	return s.rs.AcquireAbove(ctx, req, floor)
}

// RaiseFence implements core.FenceRaiser, for a Store that is a Redlock node: Acquire, where the
// lease, new or already held, has a fence of at least fence, and the key's counter with it. One
// script call. A fence above 2^53 − 2^32 is core.ErrInvalid.
func (s *Store) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	return s.rs.RaiseFence(ctx, req, fence)
}

// Extend implements core.Store: one script call. It renews the holder's lease for req.TTL from
// now and reports it, with the value its latest grant set; a lease that has expired or was
// released is core.ErrLost, never revived.
func (s *Store) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	return s.rs.Extend(ctx, req)
}

// Release implements core.Store: one script call. It ends the holder's lease and reports whether
// there was one; the freed permits go to the head of the key's line in the same call, and the
// new holders' Stores are told: this one from the reply, others by a PUBLISH on their channel.
// It first waits for the leaves of the holder's failed tries that this Store is still sending
// (each for at most 2 s), so that such a try cannot take a lease after the release.
func (s *Store) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	return s.rs.Release(ctx, req)
}

// Inspect implements core.Store: one script call, which writes nothing (an unused key creates
// no Redis key). The leases are in fence order, with their values; the waiters are the key's
// line, head first, with their permits and values, less places whose wait has ended. It first
// waits for the leaves of the key's line this Store is still sending in the background.
func (s *Store) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	return s.rs.Inspect(ctx, key)
}

// Register implements core.Notifier. It runs no script: the Store's first waiter opens its one
// subscription connection, and the first waiter on a key sends a SUBSCRIBE to the key's channel
// (kept for 30 s after its last waiter). The Waiter is Reliable while that subscription is
// confirmed and the connection up; its Close leaves the key's line (one script call, in the
// background) if the waiter still had a place there. After Close, or once ctx has ended,
// Register fails with core.ErrClosed or ctx's error, and leaves the place the caller's refused
// try took.
func (s *Store) Register(ctx context.Context, req core.AcquireRequest) (core.Waiter, error) {
	return s.rs.Register(ctx, req)
}

// Watch implements core.Watcher: one script call, which makes every script that grants a new
// lease on key, releases one or gives one back PUBLISH on the key's changed channel for the next
// 30 s (the Store refreshes that every 10 s in the background while it has watches on the key),
// and a SUBSCRIBE to that channel on the Store's one subscription connection (not waited for).
// The Watch starts with a value in C and is Reliable once the subscription is confirmed; it
// hears the changes made through every Store on the server, of either driver. Keys nobody
// watches pay nothing: their scripts publish nothing. A watched key's lease data stays in Redis
// at least until the watch's deadline. Close ends the watch without I/O. After
// Close of the Store, or once ctx has ended, Watch fails with core.ErrClosed or ctx's error.
func (s *Store) Watch(ctx context.Context, key string) (core.Watch, error) {
	return s.rs.Watch(ctx, key)
}

// Close stops the Store's subscription connection and wakes its waiters, which fail with
// core.ErrClosed; it sends, before it returns, the leaves its waiters owe the keys' lines (each
// retried for at most 2 s). Later calls fail with core.ErrClosed. The go-redis client stays
// open. Close is idempotent and returns nil.
func (s *Store) Close() error { return s.rs.Close() }
