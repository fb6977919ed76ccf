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
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
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

// driver is the rediscore.Client over valkey-go.
type driver struct {
	c  vk.Client
	fn *rediscore.Functions
}

// Run calls the script's function (FCALL; FUNCTION LOAD once per server), or where the server
// refuses functions uses valkey-go's script helper: EVALSHA, and EVAL on NOSCRIPT. valkey-go
// dials a connection when a call first needs it, under that call's ctx, and hands the calls
// waiting for the same connection that dial's error: another caller's short deadline can fail a
// call whose own ctx is fine, before anything was sent. Such a call is made again, up to
// unsentRetries times in all. A call whose ctx can be canceled but has no deadline is sent with a
// deadline that never comes, and ends defaultCancelGrace after ctx does (see New and graceCtx).
func (d *driver) Run(ctx context.Context, s rediscore.Script, c rediscore.Call) (any, error) {
	call := ctx
	if _, ok := ctx.Deadline(); !ok && ctx.Done() != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g := &graceCtx{Context: ctx}
		defer g.end()
		call = g
	}
	v, err := d.fn.Run(call, d, s, c)
	for i := 1; i < unsentRetries && err != nil && !ended(ctx) && unsent(err); i++ {
		v, err = d.fn.Run(call, d, s, c)
	}
	return v, err
}

// graceCtx is the ctx Run sends a call under when the caller's ctx can be canceled but has no
// deadline: one with a deadline that never comes, whose Done closes defaultCancelGrace after the
// caller's ctx ends. valkey-go sends a call with a deadline synchronously while its connection is
// idle, bounded by ConnWriteTimeout instead of the deadline (a call that can be canceled and has
// no deadline it always sends through the connection's background pipeline, two goroutine
// hand-offs more), and through the background pipeline otherwise, where Done ends the wait. So
// the call's reply, which reports what the server did, is waited for after the caller's ctx ends,
// but not forever: sent without cancel, a call in the background pipeline waited for a server
// that no longer answers as long as valkey-go's background PING let it, forever with
// Dialer.KeepAlive < 0, where valkey-go neither pings nor sets a deadline on the connection.
//
// Done's channel, and the watch of the caller's ctx behind it, are made only when asked for (the
// synchronous path never asks), so the usual call costs one allocation. Value is the caller's.
type graceCtx struct {
	context.Context // the caller's

	mu     sync.Mutex
	done   chan struct{} // made by Done
	stop   func() bool   // ends the watch of the caller's ctx that Done set up
	timer  *time.Timer   // closes done, from the end of the caller's ctx
	closed bool          // done is closed
	over   bool          // Run has returned: nothing more to start
}

// never is graceCtx's deadline: past any ConnWriteTimeout, which valkey-go applies instead on
// a synchronous call (pipe.go syncDo), and far from the end of time.Time's range.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Deadline reports a deadline that never comes.
func (g *graceCtx) Deadline() (time.Time, bool) { return never, true }

// Done returns a channel closed the grace after the caller's ctx ends, or after Done is first
// asked if that is later (the end of ctx is seen only from then on: a call that Run makes after
// a synchronous one outlived ctx gets its whole grace); never, if Run has returned before it was
// asked for. Until Done is asked, Err is nil whenever ctx ended: such a call is still sent.
func (g *graceCtx) Done() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done == nil {
		g.done = make(chan struct{})
		if !g.over {
			g.stop = context.AfterFunc(g.Context, g.ctxEnded)
		}
	}
	return g.done
}

// ctxEnded starts the grace.
func (g *graceCtx) ctxEnded() {
	grace := defaultCancelGrace
	if d := cancelGrace.Load(); d > 0 {
		grace = time.Duration(d)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.over {
		g.timer = time.AfterFunc(grace, g.expire)
	}
}

// expire closes done.
func (g *graceCtx) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		close(g.done)
	}
}

// Err is the caller's ctx's error once done is closed, and nil before.
func (g *graceCtx) Err() error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if !closed {
		return nil
	}
	if err := g.Context.Err(); err != nil {
		return err
	}
	return context.Canceled
}

// end stops the watch and the grace's timer: Run has returned.
func (g *graceCtx) end() {
	g.mu.Lock()
	g.over = true
	stop, timer := g.stop, g.timer
	g.mu.Unlock()
	if stop != nil {
		stop()
	}
	if timer != nil {
		timer.Stop()
	}
}

// defaultCancelGrace is how long after its ctx ends Run still waits for a call's reply (see
// graceCtx): valkey-go's default ConnWriteTimeout.
const defaultCancelGrace = 10 * time.Second

// cancelGrace, when positive, replaces defaultCancelGrace (in ns): for tests.
var cancelGrace atomic.Int64

// ended reports whether ctx has ended, or its deadline has passed though its timer has not yet
// set Err (rediscore.CtxErr): valkey-go's syncDo cuts off the reply of a call that was sent when
// the call's own deadline strikes the conn, and returns context.DeadlineExceeded, which may reach
// Run before ctx.Err() does. That error is the call's own, and the script may have run.
func ended(ctx context.Context) bool { return rediscore.CtxErr(ctx) != nil }

// unsentRetries bounds the calls Run makes of one script call that failed unsent.
const unsentRetries = 3

// unsent reports whether err says the call never left the client: a failed dial, or a ctx error
// that is not the call's own (another caller's, whose dial the call waited for).
func unsent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// FCall implements rediscore.FunctionClient.
func (d *driver) FCall(ctx context.Context, s rediscore.Script, c rediscore.Call) (any, error) {
	b := d.c.B().Fcall().Function(rediscore.FunctionName(s)).Numkeys(int64(c.Keys))
	k := b.Key()
	for i := range c.Keys {
		k = k.Key(c.Key(i))
	}
	a := k.Arg()
	for _, v := range c.ARGV() {
		a = a.Arg(argString(v))
	}
	return d.c.Do(ctx, a.Build()).ToAny()
}

// Eval implements rediscore.FunctionClient: valkey-go's script helper.
func (d *driver) Eval(ctx context.Context, s rediscore.Script, c rediscore.Call) (any, error) {
	keys := make([]string, c.Keys)
	for i := range keys {
		keys[i] = c.Key(i)
	}
	argv := c.ARGV()
	args := make([]string, len(argv))
	for i, v := range argv {
		args[i] = argString(v)
	}
	return scripts[s].Exec(ctx, d.c, keys, args).ToAny()
}

// LoadLibrary implements rediscore.FunctionClient: FUNCTION LOAD on every node the client knows
// (a Cluster's replicas answer READONLY, which rediscore passes over).
func (d *driver) LoadLibrary(ctx context.Context) []error {
	var errs []error
	for _, n := range d.c.Nodes() {
		errs = append(errs, n.Do(ctx, n.B().FunctionLoad().FunctionCode(rediscore.Library).Build()).Error())
	}
	return errs
}

// Reply implements rediscore.FunctionClient.
func (d *driver) Reply(err error) (string, bool) {
	if ve, ok := vk.IsValkeyErr(err); ok && !ve.IsNil() {
		return ve.Error(), true
	}
	return "", false
}

// argString returns an ARGV value as the string valkey-go sends.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	default:
		return fmt.Sprint(v)
	}
}

// Listen keeps one dedicated connection with pub/sub hooks; when it breaks, it reports Down,
// takes a new one and subscribes again to every channel that has waiters.
func (d *driver) Listen(ctx context.Context, subs rediscore.Listener) (rediscore.PubSub, func()) {
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
