// Package valkey is the Leasehold store over a valkey-go client (github.com/valkey-io/valkey-go),
// standalone or cluster, as the caller built it. Each operation is one script call, one round trip
// (FCALL of a library loaded once per server, or EVALSHA where the server has no functions); a
// lease's value costs no key or command more. A release grants the freed permits to the key's line
// of waiters and tells the new holders' Stores through pub/sub, on a dedicated connection that is
// subscribed again after a reconnect. Client-side caching plays no part; a client built with
// DisableCache works as well. A Store is safe for concurrent use.
//
// # Errors
//
// Errors of the server or the network start with "valkey: ", then valkey-go's; a sentinel of
// package core (core.ErrClosed, core.ErrLost, core.ErrInvalid) or ctx's error is returned as it is,
// or with a detail after it. So is the *core.LimitMismatchError of a request whose limit is not the
// key's (that of its leases, or of its waiters when it has none), which was refused at once and
// wrote nothing; and the *LayoutError of a key or library written by a Leasehold of another
// layout version (errors.Is ErrLayoutVersion), which changed nothing. The portable layer (package primitives) names the operation and the key. A
// standalone client's failure to use its server reads as the sentence the leasehold CLI prints for
// it, and wraps valkey-go's error: "valkey: redis ADDR unreachable: dial tcp ...", "valkey: redis
// ADDR: authentication failed: ...". valkey-go does not tell whether it makes TLS handshakes, so
// the Store never probes the address: a client that cannot reach a Redis server at all fails in
// vk.NewClient, before a Store exists.
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
// are those of package goredis too, so Stores of both drivers on one server exclude and wake each
// other.
//
// # Contexts and timeouts
//
// valkey-go bounds a call by ctx's deadline, and by its ConnWriteTimeout (10 s by default). A call
// whose ctx can be canceled but has no deadline the Store sends as valkey-go sends a call with a
// deadline: alone and synchronously on an idle connection, which spares an uncontended Mutex pair
// about a fifth of its time, rather than through the connection's background pipeline. Once its ctx
// is canceled, such a call still waits for its reply, and returns what the reply says (Acquire
// reports ctx's error then, and gives back what the try took). On a server that does not answer it
// ends by ConnWriteTimeout when sent synchronously (never, if that is negative, as under
// context.Background), and otherwise, in the background pipeline or in a dial, 10 s after ctx ended
// or after it got there, whichever is later. A ctx that ended before the call is sent fails it. The
// waits between calls (for a grant, a retry, a refresh) always end when ctx does.
package valkey

import (
	"slices"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/diagnose"
)

// Store is a core.Store, core.Notifier, core.Watcher and core.FenceRaiser on Redis or Valkey
// through valkey-go: the Redis Store both adapters share (its methods Acquire, AcquireAbove,
// RaiseFence, Extend, Release, Inspect, Register, Watch and Close are documented there and in
// the package doc), plus Fenced and FenceTag. Make one with New; its methods are safe for
// concurrent use.
//
// Each operation is one script call. A refused Acquire with req.Wait > 0 keeps a place in the
// key's FIFO line; a try that fails in flight is followed by a leave in the background, which
// Release, Inspect and Close wait for (each retried for at most 2 s). Register runs no script; a
// Watch is one script call and a SUBSCRIBE it does not wait for. After Close, or once ctx has
// ended, calls fail with core.ErrClosed or ctx's error. Close leaves the valkey-go client open.
type Store struct {
	*store
	c vk.Client
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
// core.ErrInvalid. The client stays the caller's: Close does not close it. The package doc says how
// calls end with their ctx.
func New(client vk.Client, opts ...Option) (*Store, error) {
	opts = slices.Clip(opts)
	if client != nil && client.Mode() == vk.ClientModeCluster {
		opts = append(opts, rediscore.WithClusterPubSub())
	}
	opts = append(opts, rediscore.WithDiagnosis(rediscore.Diagnosis{Endpoint: func() (diagnose.Endpoint, int, bool) {
		return endpoint(client)
	}}))
	rs, err := rediscore.New("valkey", client, &adapter{c: client}, opts...)
	if err != nil {
		return nil, err
	}
	return &Store{store: rs, c: client}, nil
}

// endpoint returns the address of the one server a standalone client sends to, for the Store's
// errors (rediscore.Diagnosis). valkey-go does not tell whether it makes TLS handshakes: the
// errors read the client's words, and probe nothing.
func endpoint(client vk.Client) (diagnose.Endpoint, int, bool) {
	if client.Mode() != vk.ClientModeStandalone {
		return diagnose.Endpoint{}, 0, false
	}
	nodes := client.Nodes()
	if len(nodes) != 1 {
		return diagnose.Endpoint{}, 0, false
	}
	for addr := range nodes {
		network := "tcp"
		if strings.HasPrefix(addr, "/") {
			network = "unix"
		}
		return diagnose.Endpoint{Network: network, Addr: addr, Unprobed: true}, -1, true
	}
	return diagnose.Endpoint{}, 0, false
}
