package rediscore

import "context"

// Adapter is what a Redis client adapter (backend/goredis, backend/valkey, or a third one)
// implements: the client's own primitives, and nothing of Leasehold's. The Store decides every
// command (FCALL, or EVALSHA and EVAL where the server refuses functions; FUNCTION LOAD; the
// retry of a command that never left the client) and hands the adapter commands to send; no
// method of an Adapter calls back into the Store, except that Listen reports what its
// subscription connection receives to the Listener it is given.
//
// An adapter's methods are safe for concurrent use. Its Store (see New) is the adapter's
// package's Store: the adapter embeds it, and adds only what is the client's own (Fenced).
type Adapter interface {
	// Do sends the command c.Args (its c.Keys keys at Head; on a Cluster, to their slot's
	// node) once: never again after it may have reached the server, so that a reply that does
	// not come is an error, not a second run. It returns the reply as int64, string, []any and
	// nil values, or the client's error. It returns by ctx's deadline; a call whose ctx can be
	// canceled but has no deadline may wait for its reply after ctx ends, bounded by the
	// client's own timeouts (a reply says what the server did, which the Store judges). It may
	// send c together with other callers' commands, and may keep c.Args: the Store never
	// changes them after.
	Do(ctx context.Context, c Call) (any, error)
	// LoadLibrary runs FUNCTION LOAD library on every node the client sends scripts to (on a
	// Cluster, every primary; a replica's READONLY is passed over), and returns each node's
	// error (nil for a node that loaded it).
	LoadLibrary(ctx context.Context, library string) []error
	// ErrorReply reports whether err is an error reply of the server (not its nil reply), and
	// its text: NOSCRIPT, NOPERM and the scripts' own errors are read from it.
	ErrorReply(err error) (msg string, ok bool)
	// Unsent reports whether err says a command never left the client (a failed dial, no free
	// connection in the pool in time): the Store sends it again, up to unsentTries in all,
	// while ctx lasts.
	Unsent(err error) bool
	// Listen opens the Store's subscription connection, reports what it receives to l (and
	// l.Down when it breaks; subscribing again after a reconnect to l.Channels if the client
	// does not) until ctx ends, and returns the PubSub that sends on it and a function that
	// waits until everything Listen started has ended.
	Listen(ctx context.Context, l Listener) (PubSub, func())
}

// PubSub is an adapter's subscription connection: one per Store, shared by all its waiters and
// watches. Its methods send the command and need not wait for the server's confirmation, which
// the adapter reports to Listener.Confirmed. The Store calls them one at a time.
type PubSub interface {
	// Subscribe sends SUBSCRIBE for channel.
	Subscribe(ctx context.Context, channel string) error
	// Unsubscribe sends UNSUBSCRIBE for channel.
	Unsubscribe(ctx context.Context, channel string) error
}

// Listener hears what an adapter's subscription connection receives (see Adapter.Listen). Its
// methods do not block on the network and are safe for concurrent use.
type Listener interface {
	// Confirmed reports the server's confirmation of a subscription to channel. The key's
	// waiters are woken to try again, in case a grant came before the subscription did.
	Confirmed(channel string)
	// Message reports a message received on channel: grants made from the key's line, or a
	// watched key's change. It wakes the waiters granted, and no others.
	Message(channel, payload string)
	// Down reports that the connection was lost: messages may be missed until every channel is
	// confirmed again. Every waiter is woken and falls back to its retry interval.
	Down()
	// Channels returns the channels that should be subscribed, for an adapter that subscribes
	// again by itself after a reconnect.
	Channels() []string
}
