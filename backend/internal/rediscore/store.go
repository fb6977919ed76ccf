package rediscore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/backend/internal/waitline"
	"github.com/leasehold/leasehold/core"
)

// Store is a complete core.Store, core.Notifier, core.Watcher and core.FenceRaiser over an
// Adapter; each adapter's Store embeds one. It checks the closed flag and ctx before every call,
// chooses and sends the commands (see functions), puts the adapter's name before an error of
// the server or the network, and opens the subscription connection on the first waiter or
// watch. Safe for concurrent use.
type Store struct {
	name      string
	id        string // random: names the Store's channels
	wire      wire
	fn        functions
	layout    layout
	names     nameCache
	durations durations
	closed    atomic.Bool

	mu          sync.Mutex // guards the lazily opened subscription
	sub         *subscriber
	linesLoaded atomic.Pointer[waiters] // sub's waiters, once opened, for the hot path
	cancel      context.CancelFunc
	wait        func()
	// listens says a PUBLISH on this Store's channel counts it while it listens (not a Cluster):
	// a release passes over the waiters of a Store that no longer listens.
	listens bool

	diagnosis Diagnosis
	answered  atomic.Bool // a call has had a reply: the server is Redis (see diagnosed)

	leaves *waitline.Leaves
	unsure unsureLeaves  // leaves whose sends went unanswered
	tries  atomic.Uint64 // numbers the named tries (see Acquire), for their ids
}

var (
	_ core.Store       = (*Store)(nil)
	_ core.Notifier    = (*Store)(nil)
	_ core.FenceRaiser = (*Store)(nil)
	_ core.Watcher     = (*Store)(nil)
)

// Option configures a Store; the adapters' options are these.
type Option func(*options)

type options struct {
	prefix    string
	cluster   bool
	diagnosis Diagnosis
}

// WithPrefix sets the prefix of every key and channel the Store uses (default "leasehold:").
// It must not contain '{' or '}'.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// WithClusterPubSub tells the Store that its server is a Cluster (or any set of servers), where a
// PUBLISH counts only the subscribers of one node: a release then cannot tell a waiter whose
// process died from one listening on another node, and a dead waiter costs its TTL. The adapters
// set it for their cluster clients.
func WithClusterPubSub() Option {
	return func(o *options) { o.cluster = true }
}

// New returns the Store of the adapter called name (which its errors start with) over a, after
// checking its arguments: a nil user client (userClient, the value the caller passed) or a bad
// option is an error wrapping core.ErrInvalid. It sends nothing.
func New(name string, userClient any, a Adapter, opts ...Option) (*Store, error) {
	if isNil(userClient) {
		return nil, fmt.Errorf("%s: new: %w: client: must not be nil", name, core.ErrInvalid)
	}
	o := options{prefix: defaultPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	l, err := newLayout(o.prefix)
	if err != nil {
		return nil, fmt.Errorf("%s: new: %w", name, err)
	}
	var id [8]byte
	rand.Read(id[:])
	s := &Store{name: name, id: hex.EncodeToString(id[:]), wire: wire{a}, layout: l, listens: !o.cluster, diagnosis: o.diagnosis}
	s.leaves = waitline.NewLeaves(context.Background())
	s.names.seed = maphash.MakeSeed()
	return s, nil
}

// isNil reports whether v is nil or a nil pointer, map, func, channel or interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.Slice:
		return r.IsNil()
	}
	return false
}

// run runs script on key's Redis keys after checking the Store and ctx.
func (s *Store) run(ctx context.Context, script Script, key string, args argList) (any, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.send(ctx, script, key, args)
}

// send is run without the checks: for a caller that made them, and that takes an error as a call
// that may have reached the server (ctx may have ended since).
func (s *Store) send(ctx context.Context, script Script, key string, args argList) (any, error) {
	sent := time.Now()
	r, err := s.fn.run(ctx, &s.wire, script, call(s.keyNames(key), &args))
	if err != nil {
		// Another layout version's data or library: the server answered, and changed nothing.
		le, ok := errors.AsType[*LayoutError](err)
		if !ok {
			le = layoutError(err)
		}
		if le != nil {
			return nil, fmt.Errorf("%s: %w", s.name, le)
		}
		return nil, s.clientError(ctx, sent, err)
	}
	if !s.answered.Load() {
		s.answered.Store(true)
	}
	return r, nil
}

// keyNames returns key's names.
func (s *Store) keyNames(key string) *keyNames { return s.names.get(s.layout, key) }

// check returns core.ErrClosed once the Store is closed, else ctx's error.
func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	return ctx.Err()
}

// wire is a Store's Adapter, with the resending of a command that never left the client.
type wire struct{ Adapter }

// unsentTries bounds the sends of one command whose sends failed before it left the client.
const unsentTries = 3

// do sends c once (Adapter.Do), and again, up to unsentTries in all, a few milliseconds apart,
// while the adapter says it never left the client and ctx lasts.
func (w *wire) do(ctx context.Context, c Call) (any, error) {
	backoff := 8 * time.Millisecond
	for i := 1; ; i++ {
		v, err := w.Do(ctx, c)
		if err == nil || i == unsentTries || !w.Unsent(err) || CtxErr(ctx) != nil {
			return v, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		backoff *= 2
	}
}

// CtxErr is ctx's error, or context.DeadlineExceeded when its deadline has passed though its
// timer has not yet set Err, or nil: the deadline that cut a call may reach the client before
// ctx's timer does, as net's dial's "i/o timeout" (which is not context.DeadlineExceeded) or as a
// client's own conversion of its connection's timeout.
func CtxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// replyError is err, from decoding a reply, as the Store reports it: a reply it cannot read
// after the driver's name, a sentinel as it is.
func (s *Store) replyError(err error) error {
	if errors.Is(err, errReply) {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return err
}

// subscriber returns the Store's subscriber, opening its connection the first time; nil once
// the Store is closed without having opened it.
func (s *Store) subscriber() *subscriber {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub == nil && s.closed.Load() {
		return nil // a closed Store opens no connection: nothing would stop it
	}
	if s.sub == nil {
		var ctx context.Context
		ctx, s.cancel = context.WithCancel(context.Background())
		sub := newSubscriber(s.layout, s.id, nil)
		sub.lines.leave = s.leave
		sub.watches.mark = s.mark
		sub.ps, s.wait = s.wire.Listen(ctx, sub)
		s.sub = sub
		s.linesLoaded.Store(sub.lines)
	}
	return s.sub
}

// loadLines returns the subscriber's waiters if it was opened, without locking.
func (s *Store) loadLines() *waiters { return s.linesLoaded.Load() }

// Close stops the Store's subscription connection, wakes its waiters (which then fail with
// core.ErrClosed), and sends the leaves its waiters owe the keys' lines, waiting for them within
// waitline.CloseWait; later operations return core.ErrClosed. The driver's client is left open. Close
// is idempotent and returns nil.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub != nil {
		owed := s.sub.close()
		s.cancel()
		s.wait()
		s.sub.watches.bg.Wait() // refreshes of watches, which fail at once now
		for _, l := range owed {
			s.leave(l.key, l.holder, l.floor)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitline.CloseWait)
	defer cancel()
	s.leaves.Close(ctx)
	return nil
}

// FenceRecord returns the Redis key of s that keeps the highest fence accepted for resource by
// a fenced write, and the hash tag that puts a key in its Cluster slot: "{R}", R being resource
// with '%', '{' and '}' percent-encoded, as a lease key's. It is a function, not a method, so
// that the adapters' Stores, which embed s, do not export it.
func FenceRecord(s *Store, resource string) (key, tag string) {
	t := s.layout.tag(resource)
	return t + "fence", t[len(s.layout.prefix) : len(t)-1]
}
