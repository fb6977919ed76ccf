package valkey

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
)

// adapter is the rediscore.Adapter over valkey-go.
type adapter struct{ c vk.Client }

// Do implements rediscore.Adapter: c.Args as one command, which valkey-go sends once (it sends
// again only commands marked read-only). valkey-go dials a connection when a call first needs
// it, under that call's ctx, and hands the calls waiting for the same connection that dial's
// error: another caller's short deadline can fail a call whose own ctx is fine, before anything
// was sent (see Unsent). A call whose ctx can be canceled but has no deadline is sent with a
// deadline that never comes, and ends defaultCancelGrace after ctx does (see graceCtx, and the
// package doc).
func (a *adapter) Do(ctx context.Context, c rediscore.Call) (any, error) {
	g, err := grace(ctx)
	if err != nil {
		return nil, err
	}
	if g != nil {
		defer g.end()
		ctx = g
	}
	return a.c.Do(ctx, a.build(c)).ToAny()
}

// grace returns the ctx to send a call of ctx under when ctx can be canceled but has no
// deadline, so that valkey-go keeps an idle connection out of its background pipeline (see
// graceCtx; its end is for when the call has returned); nil when ctx is sent as it is; or ctx's
// error when it has ended already.
func grace(ctx context.Context) (*graceCtx, error) {
	if _, ok := ctx.Deadline(); ok || ctx.Done() == nil {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &graceCtx{Context: ctx}, nil
}

// build returns c.Args as a valkey-go command, its keys marked (for a Cluster's slot).
func (a *adapter) build(c rediscore.Call) vk.Completed {
	n := min(rediscore.Head, len(c.Args))
	cmd := a.c.B().Arbitrary(upper(argString(c.Args[0])))
	for _, v := range c.Args[1:n] {
		cmd = cmd.Args(argString(v))
	}
	for i := range c.Keys {
		cmd = cmd.Keys(c.Key(i))
	}
	for _, v := range c.Args[n+c.Keys:] {
		cmd = cmd.Args(argString(v))
	}
	return cmd.Build()
}

// upper returns the command name cmd in upper case, which valkey-go's Build checks without a
// copy (rediscore's commands are go-redis's lower case).
func upper(cmd string) string {
	switch cmd {
	case "fcall":
		return "FCALL"
	case "evalsha":
		return "EVALSHA"
	case "eval":
		return "EVAL"
	}
	return cmd
}

// LoadLibrary implements rediscore.Adapter: FUNCTION LOAD on every node the client knows (a
// Cluster's replicas answer READONLY, which rediscore passes over).
func (a *adapter) LoadLibrary(ctx context.Context, library string) []error {
	g, err := grace(ctx)
	if err != nil {
		return []error{err}
	}
	if g != nil {
		defer g.end()
		ctx = g
	}
	var errs []error
	for _, n := range a.c.Nodes() {
		errs = append(errs, n.Do(ctx, n.B().FunctionLoad().FunctionCode(library).Build()).Error())
	}
	return errs
}

// ErrorReply implements rediscore.Adapter.
func (a *adapter) ErrorReply(err error) (string, bool) {
	if ve, ok := vk.IsValkeyErr(err); ok && !ve.IsNil() {
		return ve.Error(), true
	}
	return "", false
}

// Unsent implements rediscore.Adapter: a failed dial, or a ctx error that is not the call's own
// (another caller's, whose dial the call waited for; the Store sends nothing again once the
// call's own ctx has ended).
func (a *adapter) Unsent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
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

// Listen implements rediscore.Adapter: it keeps one dedicated connection with pub/sub hooks; when it breaks, it reports Down,
// takes a new one and subscribes again to every channel that has waiters.
func (a *adapter) Listen(ctx context.Context, subs rediscore.Listener) (rediscore.PubSub, func()) {
	ps := &pubsub{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := 10 * time.Millisecond
		for ctx.Err() == nil {
			dc, release := a.c.Dedicate()
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
