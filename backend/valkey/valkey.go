// Package valkey is the Leasehold store over a valkey-go client (github.com/valkey-io/valkey-go),
// standalone or cluster, as the caller built it. Every operation is one script call (one round
// trip); a release grants the freed permits to the key's waiting line and tells the new holders'
// Stores through pub/sub, on one dedicated subscription connection per Store, resubscribed after
// a reconnect. The scripts, key layout and wake-up logic are shared with backend/goredis, so
// stores of both drivers on one server exclude and wake each other.
//
// Errors of the server or the network start with "valkey: ", then valkey-go's; a sentinel of
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
// Client-side caching plays no part; a client built with DisableCache works as well.
// A Store is safe for concurrent use.
package valkey

import (
	"context"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/core"
)

// Store is a core.Store, core.Notifier, core.Watcher and core.FenceRaiser on Redis or Valkey
// through valkey-go. Make one with New; its methods are safe for concurrent use.
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
// waiter opens one dedicated subscription connection. The client stays the caller's: Close
// does not close it. A nil client, or a prefix with a brace, is an error wrapping
// core.ErrInvalid.
//
// valkey-go bounds a call by ctx's deadline, and by its ConnWriteTimeout (10 s by default); a
// call whose ctx can be canceled but has no deadline it sends through its connection's
// background pipeline, two goroutine hand-offs more, so that canceling ctx ends the wait. A
// Store sends such a call with a deadline that never comes instead, so that valkey-go sends it
// as it does a call with a deadline: alone on its connection, synchronously, while nothing else
// uses that connection, which spares an uncontended Mutex pair about a fifth of its time. Once
// ctx is canceled, such a call still waits for its reply, and returns what the reply says (the
// Store's Acquire reports ctx's error then, and gives back what the try took); on a server that
// does not answer it ends by ConnWriteTimeout when sent synchronously, and 10 s after ctx ended
// when in the background pipeline (a connection that two overlapping calls have switched to it,
// where ConnWriteTimeout bounds no call when Dialer.KeepAlive is negative) or in a dial, or 10 s
// after it got there if a synchronous call of the same operation kept it past ctx's end. With
// ConnWriteTimeout negative, a call sent synchronously waits for its reply however long it
// takes, as one under context.Background does. A ctx that has ended before the call is sent
// fails it, as valkey-go does. The waits between calls (for a grant, a retry, a refresh) always
// end when ctx does.
func New(client vk.Client, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if client != nil && client.Mode() == vk.ClientModeCluster {
		o.shared = append(o.shared, rediscore.WithClusterPubSub())
	}
	rs, err := rediscore.New("valkey", client, &driver{c: client, fn: new(rediscore.Functions)}, o.shared...)
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
// retried for at most 2 s). Later calls fail with core.ErrClosed. The valkey-go client stays
// open. Close is idempotent and returns nil.
func (s *Store) Close() error { return s.rs.Close() }
