package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/internal/faultproxy"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// lazyPool returns a pool to the database at addr, which dials nothing yet; it is closed when t
// ends.
func lazyPool(t *testing.T, addr string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@"+addr+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestSetupAtAServerOfAnotherKindSaysWhatIsThere: New, pointed at a server that is
// not PostgreSQL, fails in the words the CLI uses for it, naming what answers there: an HTTP or a
// Redis server (which keep the connection waiting until ctx ends), a listener that hangs up. Its
// error still wraps the client's, and ctx's.
func TestSetupAtAServerOfAnotherKindSaysWhatIsThere(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	webAddr := web.Listener.Addr().String()
	redisAddr := redistest.StartServer(t).Addr
	rude := faultproxy.HangUp(t)
	for _, tc := range []struct {
		name, addr, want string
		is               error
	}{
		{"HTTP", webAddr, "postgres " + webAddr + `: not a PostgreSQL server: it answers HTTP ("HTTP/1.0 404 Not Found")`, context.DeadlineExceeded},
		{"Redis", redisAddr, "postgres " + redisAddr + ": not a PostgreSQL server: it answers as a Redis server does (use package goredis or valkey)", context.DeadlineExceeded},
		{"hanging up", rude, "postgres " + rude + ": not a PostgreSQL server: it closes the connection without a reply", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			_, err := postgres.New(ctx, lazyPool(t, tc.addr))
			if err == nil || !strings.HasSuffix(err.Error(), ": "+tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("New: %v\nwant an error ending %q", err, tc.want)
			}
		})
	}
}

// TestOperationsAtAClosedPortSayItIsUnreachable: an operation whose database refuses connections
// says, in the CLI's words, that the database is unreachable, and wraps the refusal.
func TestOperationsAtAClosedPortSayItIsUnreachable(t *testing.T) {
	t.Parallel()
	srv := server(t)
	cfg := poolConfig(t, srv.URL, nil)
	target := fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	var (
		s     *postgres.Store
		proxy *faultproxy.Proxy
	)
	for try := 0; s == nil; try++ {
		proxy = redistest.StartProxy(t, target)
		st := newStore(t, strings.Replace(srv.URL, target, proxy.Addr, 1))
		proxy.Close()
		// Keep the closed port from being bound again by another test's listener (which would
		// answer, then hang up): a socket bound to it, never listening, refuses every dial.
		if err := bindOnly(t, proxy.Addr); err == nil {
			s = st
		} else if try == 2 {
			t.Fatalf("the closed port %s was bound again at once, three times: %v", proxy.Addr, err)
		}
	}
	s.Pool().Reset() // the pool's connections go: the next operation dials
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := s.Acquire(ctx, core.AcquireRequest{Key: uniqueKey(t), Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
	want := "postgres: postgres " + proxy.Addr + " unreachable: "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Acquire: %v\nwant an error starting %q that wraps the refusal", err, want)
	}
}
