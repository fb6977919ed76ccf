package goredis

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
)

var scripts = func() (s [len(rediscore.Sources)]*redis.Script) {
	for i, src := range rediscore.Sources {
		s[i] = redis.NewScript(src)
	}
	return s
}()

// driver is the rediscore.Client over go-redis.
type driver struct {
	c          redis.UniversalClient
	honoursCtx bool // the client bounds calls by ctx's deadline itself
	timesOut   bool // the client gives up on a call after its own read and write timeouts
	fn         *rediscore.Functions
	// batch sends concurrent calls together; nil when the client has no timeouts of its own
	// (a pipeline is bounded by them, not by its callers' contexts).
	batch *batcher
}

// Run calls the script's function (FCALL; FUNCTION LOAD once per server), or where the server
// refuses functions EVALSHA, and EVAL on NOSCRIPT; each command is sent once (see send). It
// returns by ctx's deadline; the package doc says how a call ends with a ctx without one.
func (d *driver) Run(ctx context.Context, s rediscore.Script, c rediscore.Call) (any, error) {
	if d.direct(ctx) {
		// A reply that came after ctx ended is returned as it is: it says what the server did
		// (a release that went through is one), which the Store's operations judge.
		return d.fn.Run(ctx, d, s, c)
	}
	type reply struct {
		v   any
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := d.fn.Run(ctx, d, s, c)
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// direct says a call on ctx runs on the caller's goroutine: the client ends it by ctx's deadline
// itself, or ctx has no deadline and the client's own timeouts end it (see the package doc).
func (d *driver) direct(ctx context.Context) bool {
	if d.honoursCtx || ctx.Done() == nil {
		return true
	}
	_, ok := ctx.Deadline()
	return !ok && d.timesOut
}

// functions are the names of the library's functions, indexed by rediscore.Script, boxed once.
var functions = func() (f [len(rediscore.Sources)]any) {
	for i := range f {
		f[i] = rediscore.FunctionName(rediscore.Script(i))
	}
	return f
}()

// FCall implements rediscore.FunctionClient: the command go-redis's FCall builds, sent from
// c.Args as they are, once (see send).
func (d *driver) FCall(ctx context.Context, s rediscore.Script, c rediscore.Call) (any, error) {
	c.Args[0], c.Args[1], c.Args[2] = "fcall", functions[s], c.Keys
	return d.send(ctx, c, true)
}

// Eval implements rediscore.FunctionClient: EVALSHA, and EVAL when the server has not seen the
// script (NOSCRIPT), as go-redis's script helper does, each sent once (see send).
func (d *driver) Eval(ctx context.Context, s rediscore.Script, c rediscore.Call) (any, error) {
	c.Args[0], c.Args[1], c.Args[2] = "evalsha", scripts[s].Hash(), c.Keys
	v, err := d.send(ctx, c, false)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		c.Args[0], c.Args[1] = "eval", rediscore.Sources[s]
		v, err = d.send(ctx, c, false)
	}
	return v, err
}

// unsentTries bounds the sends of one script call whose sends failed before the command left the
// client (see unsent).
const unsentTries = 3

// send sends the command c.Args once: go-redis would send it again after a read timeout or a
// connection broken once it was written (its MaxRetries), when the server may have run it
// already, and the second run's reply would stand for the first's (a release that went through
// would report the lease gone; see once). Only a send that failed before the command left the
// client (unsent) is made again, up to unsentTries in all, a few milliseconds apart, while ctx
// lasts. batched says the call may share a pipeline with others (see batcher).
func (d *driver) send(ctx context.Context, c rediscore.Call, batched bool) (any, error) {
	backoff := 8 * time.Millisecond
	for i := 1; ; i++ {
		cmd := redis.NewCmd(ctx, c.Args...)
		if c.Keys > 0 {
			cmd.SetFirstKeyPos(rediscore.Head)
		}
		var v any
		var err error
		if batched && d.batch != nil {
			v, err = d.batch.do(ctx, cmd)
		} else {
			_ = d.c.Process(ctx, once{cmd})
			v, err = cmd.Result()
		}
		if err == nil || i == unsentTries || !unsent(err) || rediscore.CtxErr(ctx) != nil {
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

// once is a script call that go-redis sends at most once: NoRetry keeps it from running the
// command again after an error that may have come after the server ran it (a read timeout, a
// connection broken after the write), in a pipeline too. The reply that did not come is then an
// error, which the Store and the portable layer treat as a reply lost (a Release that finds
// nothing after one whose reply was lost reports the lease released, not lost).
type once struct{ *redis.Cmd }

// NoRetry implements redis.Cmder: never sent again once it may have reached the server.
func (once) NoRetry() bool { return true }

// unsent reports whether err says the command never left the client: a failed dial, or no
// connection free in the pool in time.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout)
}

// LoadLibrary implements rediscore.FunctionClient: FUNCTION LOAD on the server, every primary of
// a Cluster, or every shard of a Ring.
func (d *driver) LoadLibrary(ctx context.Context) []error {
	var (
		mu   sync.Mutex
		errs []error
	)
	load := func(ctx context.Context, c *redis.Client) error {
		err := c.FunctionLoad(ctx, rediscore.Library).Err()
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := d.c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, load)
	case *redis.Ring:
		err = c.ForEachShard(ctx, load)
	default:
		err = d.c.FunctionLoad(ctx, rediscore.Library).Err()
	}
	return append(errs, err)
}

// Reply implements rediscore.FunctionClient.
func (d *driver) Reply(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		return re.Error(), true
	}
	return "", false
}

// Listen opens a PubSub and reads it until ctx ends. After an error go-redis reconnects and
// resubscribes on the next read; until the server confirms, waiters poll.
func (d *driver) Listen(ctx context.Context, subs rediscore.Listener) (rediscore.PubSub, func()) {
	if _, ok := d.c.(*redis.Ring); ok {
		// A Ring subscribes on the shard of the first channel named (and panics with none), and
		// a PUBLISH reaches the subscribers of its own shard only: no one connection hears every
		// key. Nothing is subscribed; the Store's waiters and watches, never confirmed, poll.
		return noPubSub{}, func() {}
	}
	ps := d.c.Subscribe(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := 10 * time.Millisecond
		for {
			msg, err := ps.Receive(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				subs.Down()
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 10 * time.Millisecond
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					subs.Confirmed(m.Channel)
				}
			case *redis.Message:
				subs.Message(m.Channel, m.Payload)
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	return pubsub{ps}, func() {
		<-done
		stop()
		ps.Close()
	}
}

type pubsub struct{ ps *redis.PubSub }

// noPubSub is the PubSub of a Ring: it subscribes to nothing.
type noPubSub struct{}

func (noPubSub) Subscribe(context.Context, string) error   { return nil }
func (noPubSub) Unsubscribe(context.Context, string) error { return nil }

func (p pubsub) Subscribe(ctx context.Context, ch string) error   { return p.ps.Subscribe(ctx, ch) }
func (p pubsub) Unsubscribe(ctx context.Context, ch string) error { return p.ps.Unsubscribe(ctx, ch) }
