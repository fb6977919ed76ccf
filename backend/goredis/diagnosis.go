package goredis

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/internal/diagnose"
)

// dials is the go-redis hook that a Store adds to its client: it records the client's latest
// dial that failed, which names the reason (connection refused, say) a call cut off by its ctx
// could not reach the server, where go-redis would only log it. It leaves commands alone.
type dials struct {
	last atomic.Pointer[failedDial] // nil once a dial succeeded after it
}

// failedDial is a dial's error and when it came.
type failedDial struct {
	err error
	at  time.Time
}

// DialHook implements redis.Hook.
func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		switch {
		case err != nil:
			d.last.Store(&failedDial{err: err, at: time.Now()})
		case d.last.Load() != nil:
			d.last.Store(nil)
		}
		return c, err
	}
}

// ProcessHook implements redis.Hook: it adds nothing to a command.
func (d *dials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook: it adds nothing to a pipeline.
func (d *dials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// failure implements rediscore.Diagnosis.DialFailure.
func (d *dials) failure(since time.Time) error {
	if f := d.last.Load(); f != nil && !f.at.Before(since) {
		return f.err
	}
	return nil
}

// diagnosis returns what the Store can tell of client's connections (rediscore.Diagnosis), and
// the hook to add to client once the Store is made, or nil: for a *redis.Client, the address it
// dials (not a failover client's, which changes) and the failures the hook records. A Cluster's or
// a Ring's nodes are clients of their own, made as go-redis finds them: none.
func diagnosis(client redis.UniversalClient) (rediscore.Diagnosis, *dials) {
	c, ok := client.(*redis.Client)
	if !ok || c == nil {
		return rediscore.Diagnosis{}, nil
	}
	d := new(dials)
	diag := rediscore.Diagnosis{DialFailure: d.failure}
	if o := c.Options(); o.Addr != "" && o.Addr != "FailoverClient" {
		ep := diagnose.Endpoint{Network: o.Network, Addr: o.Addr, TLS: o.TLSConfig}
		diag.Endpoint = func() (diagnose.Endpoint, int, bool) { return ep, o.DB, true }
	}
	return diag, d
}
