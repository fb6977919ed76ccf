// Package goredis is the Leasehold store over a go-redis v9 client: a *redis.Client, a
// *redis.ClusterClient, a failover client, or any redis.UniversalClient the caller already has.
// Each operation is one script call, one round trip (FCALL of a library loaded once per server, or
// EVALSHA where the server has no functions); a lease's value costs no key or command more. A
// release grants the freed permits to the key's line of waiters and tells the new holders' Stores
// through pub/sub. A Store is safe for concurrent use.
//
// # Errors
//
// Errors of the server or the network start with "goredis: ", then go-redis's; a sentinel of
// package core (core.ErrClosed, core.ErrLost, core.ErrInvalid) or ctx's error is returned as it is,
// or with a detail after it. So is the *core.LimitMismatchError of a request whose limit is not the
// key's (that of its leases, or of its waiters when it has none), which was refused at once and
// wrote nothing; and the *LayoutError of a key or library written by a Leasehold of another
// layout version (errors.Is ErrLayoutVersion), which changed nothing. The portable layer (package primitives) names the operation and the key.
//
// A failure to use the server reads as the sentence the leasehold CLI prints for it, and wraps
// go-redis's error: "goredis: redis ADDR unreachable: dial tcp ...", "goredis: redis ADDR:
// authentication failed: ...", "goredis: redis ADDR: not a Redis server: it answers HTTP (...)".
// When go-redis's words do not say what failed (an EOF, a reply it cannot parse) and no call of the
// Store has had a reply yet, the Store of a *redis.Client probes its address, within the call's ctx
// and at most a second, once at a time for all the calls failing then; and its call cut off by its
// ctx while go-redis was still dialling names the dial that failed, after ctx's error.
//
// # Waiting and watching
//
// A Store has one subscription connection, opened by its first waiter or watch. The first waiter on
// a key subscribes to the key's channel, kept for 30 s after its last waiter; a waiter is Reliable
// while that subscription is confirmed and the connection is up. A watch marks the key watched for
// 30 s, renewed every 10 s while the Store has watches on it: until then every grant, release or
// give-back on the key publishes on its changed channel. A key nobody watches costs nothing more; a
// watched key's lease data stays in Redis at least until its mark lapses.
//
// # What a key leaves behind
//
// A key nobody holds, waits for or watches leaves no Redis key after its last release. A fence that
// a Redlock node raised above the server's clock keeps it until the clock passes that fence. A key
// whose holders and waiters died goes after a bound set by their TTLs, not by their waits;
// docs/redis-keys.md gives the bounds and the figures. The scripts, the key layout and the wake-ups
// are those of package valkey too, so Stores of both drivers on one server exclude and wake each
// other.
//
// # Contexts and timeouts
//
// Every call returns by its ctx's deadline. go-redis bounds a call by ctx's deadline only with
// ContextTimeoutEnabled (off by default), otherwise by its ReadTimeout, and ends no call when ctx
// is canceled. So over a client without ContextTimeoutEnabled, a call whose ctx has a deadline runs
// on a goroutine of its own and returns when ctx ends; that goroutine and its pooled connection
// stay busy until go-redis gives up (its ReadTimeout; never, if that is negative).
//
// A call whose ctx has no deadline runs on the caller's goroutine when the client has read and
// write timeouts, as go-redis's own commands do, which spares it a goroutine and two wake-ups
// (about a tenth of an uncontended Mutex pair). Canceling ctx then ends the call when its reply
// comes or go-redis gives up, and the call reports what the reply says (Acquire reports ctx's error
// and gives back what the try took). Without those timeouts, such a call too runs on its own
// goroutine and returns when ctx ends. The waits between calls (for a grant, a retry, a refresh)
// always end when ctx does.
//
// # Lost replies
//
// go-redis sends a command again after a read timeout or a connection broken once it was written
// (MaxRetries, 3 by default), when the server may have run it already; the second run's reply
// would then stand for the first's, and a Release that went through would report the lease lost.
// So the Store's script calls are each sent once (go-redis's NoRetry), in a pipeline too; only a
// call that failed before it left the client (a failed dial, no pooled connection in time) is
// made again, up to three times in all. A reply that does not come is an error: Acquire takes
// back what the try may have taken, as for a canceled try, and a Release that finds nothing after
// one whose reply was lost is reported by Lease.Release as a release, not a loss. The client's
// own retries of the caller's other commands are left as they are.
//
// # Concurrent callers
//
// A Store has at most two sends out at once. A call made while two are out waits; when a send
// ends, every waiting call goes in one pipeline (up to 128), on a goroutine of its own. So many
// callers on one client share round trips and system calls, and the server reads and answers them
// together, while a lone caller still sends at once. A call whose ctx ends while it waits in the
// queue returns ctx's error and is never sent; one that had left in a pipeline waits for its
// reply, bounded by the client's timeouts (with ContextTimeoutEnabled, by ctx's deadline too), as
// a call sent alone does. Over a client without read and write timeouts every call goes alone:
// nothing would bound a pipeline.
//
// A *redis.Ring has no connection that hears every shard's messages: over one, the Store subscribes
// to nothing, and its waiters and watches are never Reliable: they poll.
package goredis

import (
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/core"
)

// Store is a core.Store, core.Notifier, core.Watcher and core.FenceRaiser on Redis through
// go-redis: the Redis Store both adapters share (its methods Acquire, AcquireAbove, RaiseFence,
// Extend, Release, Inspect, Register, Watch and Close are documented there and in the package
// doc), plus Fenced and FenceTag. Make one with New; its methods are safe for concurrent use.
//
// Each operation is one script call. A refused Acquire with req.Wait > 0 keeps a place in the
// key's FIFO line; a try that fails in flight is followed by a leave in the background, which
// Release, Inspect and Close wait for (each retried for at most 2 s). Register runs no script; a
// Watch is one script call and a SUBSCRIBE it does not wait for. After Close, or once ctx has
// ended, calls fail with core.ErrClosed or ctx's error. Close leaves the go-redis client open.
type Store struct {
	*store
	a *adapter
}

// store is the shared Redis Store, embedded under an unexported name.
type store = rediscore.Store

var (
	_ core.Store       = (*Store)(nil)
	_ core.Notifier    = (*Store)(nil)
	_ core.FenceRaiser = (*Store)(nil)
	_ core.Watcher     = (*Store)(nil)
)

// ErrLayoutVersion is what the error of a call that met a key or a Redis Functions library
// written by a Leasehold of another layout version wraps (errors.Is): the call changed nothing.
// Stores of two layout versions do not share a server; the error, a *LayoutError, names the key
// or library, the version found and the version this Store speaks.
var ErrLayoutVersion = rediscore.ErrLayoutVersion

// LayoutError is the error of a call that met another layout version (see ErrLayoutVersion).
type LayoutError = rediscore.LayoutError

// Option configures a Store.
type Option = rediscore.Option

// WithPrefix sets the prefix of every key and channel the Store uses (default "leasehold:").
// It must not contain '{' or '}'.
func WithPrefix(prefix string) Option { return rediscore.WithPrefix(prefix) }

// New returns a Store over client. It sends nothing; the first waiter or watch opens the Store's
// subscription connection. A nil client, or a prefix with a brace, is an error wrapping
// core.ErrInvalid. The client stays the caller's: Close does not close it. New adds a hook to a
// *redis.Client (AddHook), which stays after Close: it records the client's failed dials for the
// Store's errors, and costs nothing per command. The package doc says how calls end with their ctx.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	a := newAdapter(client)
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		opts = append(slices.Clip(opts), rediscore.WithClusterPubSub())
	}
	diag, dialed := diagnosis(client)
	rs, err := rediscore.New("goredis", client, a, append(slices.Clip(opts), rediscore.WithDiagnosis(diag))...)
	if err != nil {
		return nil, err
	}
	if dialed != nil {
		client.AddHook(dialed)
	}
	return &Store{store: rs, a: a}, nil
}
