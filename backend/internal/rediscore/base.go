package rediscore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/core"
)

// Script names one of the scripts.
type Script int

// The scripts, in the order of Sources.
const (
	Acquire Script = iota
	Extend
	Release
	Inspect
	Leave
)

// Sources are the scripts' full sources, indexed by Script.
var Sources = [...]string{Acquire: AcquireScript, Extend: ExtendScript, Release: ReleaseScript, Inspect: InspectScript, Leave: LeaveScript}

// Client is what a driver supplies: a way to run a script, and to open the Store's
// subscription connection.
type Client interface {
	// Run runs script with keys and args in one round trip (plus a load the first time on a
	// server) and returns the reply as int64, string and []any values.
	Run(ctx context.Context, script Script, keys []string, args []any) (any, error)
	// Listen opens the Store's subscription connection, reports what it receives to subs (and
	// subs.Down when it breaks) until ctx ends, and returns the PubSub that sends on it and a
	// function that waits until everything Listen started has ended.
	Listen(ctx context.Context, subs *Subscriptions) (PubSub, func())
}

// Base is a complete core.Store and core.Notifier over a driver's Client: drivers embed it.
// It checks the closed flag and ctx before every call, wraps every error with the driver's
// name, the operation and the key, and opens the subscription on the first Register.
type Base struct {
	name   string
	id     string // random: names the Store's channels
	client Client
	layout Layout
	closed atomic.Bool

	mu         sync.Mutex // guards the lazily opened subscription
	subs       *Subscriptions
	subsLoaded atomic.Pointer[Subscriptions] // subs, once opened, for the hot path
	cancel     context.CancelFunc
	wait       func()
	bgMu       sync.Mutex     // orders leave's bg.Add before Close's bg.Wait
	bgDone     bool           // Close has stopped taking leaves; guarded by bgMu
	bg         sync.WaitGroup // waiters leaving their line
	// listens says a PUBLISH on this Store's channel counts it while it listens (not a Cluster):
	// a release passes over the waiters of a Store that no longer listens.
	listens bool

	// leaving holds the leaves not yet sent, by key and holder: the next try of that holder on
	// that key waits for them, so that a late leave never ends what a newer call was granted.
	leavingMu sync.Mutex
	leaving   map[string]*pendingLeave
	nLeaving  atomic.Int32  // len(leaving), for the hot path
	tries     atomic.Uint64 // numbers the tries that wait, for their ids
}

type pendingLeave struct {
	n    int
	done chan struct{}
}

// Option configures a Redis Store; the drivers' options are these.
type Option func(*options)

type options struct {
	prefix  string
	cluster bool
}

// WithPrefix sets the prefix of every key and channel the Store uses (default "leasehold:").
// It must not contain '{' or '}'.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// WithClusterPubSub tells the Store that its server is a Cluster (or any set of servers), where a
// PUBLISH counts only the subscribers of one node: a release then cannot tell a waiter whose
// process died from one listening on another node, and a dead waiter costs its TTL. The drivers
// set it for their cluster clients.
func WithClusterPubSub() Option {
	return func(o *options) { o.cluster = true }
}

// NewBase returns the Base of a driver called name (for error messages) over client, after
// checking its arguments: a nil user client (userClient, the value the caller passed) or a bad
// option is an error wrapping core.ErrInvalid.
func NewBase(name string, userClient any, client Client, opts ...Option) (*Base, error) {
	if isNil(userClient) {
		return nil, fmt.Errorf("leasehold/%s: new: %w: client: must not be nil", name, core.ErrInvalid)
	}
	o := options{prefix: DefaultPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	layout, err := NewLayout(o.prefix)
	if err != nil {
		return nil, fmt.Errorf("leasehold/%s: new: %w", name, err)
	}
	var id [8]byte
	rand.Read(id[:])
	return &Base{name: name, id: hex.EncodeToString(id[:]), client: client, layout: layout, listens: !o.cluster,
		leaving: map[string]*pendingLeave{}}, nil
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

// Layout returns the key layout.
func (b *Base) Layout() Layout { return b.layout }

func (b *Base) run(ctx context.Context, op, key string, script Script, args []any) (any, error) {
	if err := b.check(ctx); err != nil {
		return nil, b.wrap(op, key, err)
	}
	r, err := b.client.Run(ctx, script, b.layout.Keys(key), args)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, b.wrap(op, key, err)
	}
	return r, nil
}

func (b *Base) check(ctx context.Context) error {
	if b.closed.Load() {
		return errClosed
	}
	return ctx.Err()
}

func (b *Base) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("leasehold/%s: %s %q: %w", b.name, op, key, err)
}
