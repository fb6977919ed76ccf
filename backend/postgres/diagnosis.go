package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/diagnose"
)

// doctor says why a database could not be used, in the words the CLI uses (package diagnose).
var doctor = &diagnose.Doctor{Hints: diagnose.Hints{Redis: "use package goredis or valkey"}}

// probeAfter is how long setup runs before New probes the database's address meanwhile.
const probeAfter = 100 * time.Millisecond

// endpoint returns the address that pool dials, for a diagnosis: its host:port and how to dial
// it. ok is false for a pool with fallback hosts, or a dialer of its own, whose address it
// cannot tell.
func endpoint(pool *pgxpool.Pool) (addr string, ep diagnose.Endpoint, ok bool) {
	cc := pool.Config().ConnConfig
	if len(cc.Fallbacks) > 0 || cc.Host == "" {
		return "", diagnose.Endpoint{}, false
	}
	addr = fmt.Sprintf("%s:%d", cc.Host, cc.Port)
	if strings.HasPrefix(cc.Host, "/") {
		return addr, diagnose.Endpoint{Network: "unix", Addr: fmt.Sprintf("%s/.s.PGSQL.%d", cc.Host, cc.Port)}, true
	}
	return addr, diagnose.Endpoint{Network: "tcp", Addr: addr}, true
}

// connectionError reports whether err is a failure to reach the database or to keep its
// connection (a failed connect, a network error, an EOF), not one of a statement, which the
// server answered.
func connectionError(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	var pe *pgconn.PgError
	return err != nil && !errors.As(err, &pe) && (errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err))
}

// diagnosed is err, an operation's failure to reach the database, in the words of
// diagnose.Doctor.Postgres when it says that nothing could be reached: "postgres ADDR
// unreachable: ...". Anything else is returned as it is, and nothing is probed: New's set-up had
// the server answer as PostgreSQL, so a failure since is the network's or the server's, which a
// probe would only slow.
func diagnosed(ctx context.Context, pool *pgxpool.Pool, err error) error {
	if !diagnose.Unreachable(err) || errors.Is(err, context.Canceled) {
		return err
	}
	addr, ep, ok := endpoint(pool)
	if !ok {
		return err
	}
	return doctor.Postgres(ctx, addr, ep, err)
}

// watched runs op with ctx and returns its error, followed by what is at the database's
// address when that is not a PostgreSQL server that answers and op's error does not say so: op
// cut off by ctx's end (a server of another kind can keep a connection waiting for ever) is
// probed meanwhile, from probeAfter on; op that failed otherwise is probed after, within ctx.
func watched(ctx context.Context, pool *pgxpool.Pool, op func(context.Context) error) error {
	addr, ep, ok := endpoint(pool)
	if !ok {
		return op(ctx)
	}
	pctx, cancel := context.WithCancel(ctx)
	var found diagnose.Probed
	complete := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(probeAfter)
		defer t.Stop()
		select {
		case <-t.C:
		case <-pctx.Done():
			return
		}
		found = diagnose.Probe(pctx, ep)
		complete = pctx.Err() == nil
	}()
	err := op(ctx)
	cancel()
	<-done
	if !connectionError(err) || diagnose.Unreachable(err) {
		return err
	}
	if !complete {
		if ctx.Err() != nil {
			return err
		}
		found = diagnose.Probe(ctx, ep)
		if ctx.Err() != nil {
			return err
		}
	}
	if what := doctor.NotPostgres(addr, found); what != "" {
		return fmt.Errorf("%w: %s", err, what)
	}
	return err
}
