package valkey

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
)

var scripts = func() (s [len(rediscore.Sources)]*vk.Lua) {
	for i, src := range rediscore.Sources {
		s[i] = vk.NewLuaScript(src)
	}
	return s
}()

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
// deadline that never comes, and ends defaultCancelGrace after ctx does (see graceCtx, and the package doc).
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
