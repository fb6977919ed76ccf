package rediscore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/internal/faultproxy"
	"github.com/leasehold/leasehold/backend/postgres/pgtest"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// acquireOnce sends one Acquire to s within a few seconds and returns its error.
func acquireOnce(s core.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute})
	return err
}

// TestGoRedisErrorsSayWhatIsAtTheAddress: a go-redis Store pointed at a server it cannot use
// fails in the words the CLI uses for it, naming what answers there (HTTP, PostgreSQL, a
// listener that hangs up, nothing at all), and its error still wraps the client's.
func TestGoRedisErrorsSayWhatIsAtTheAddress(t *testing.T) {
	testenv.SkipShort(t, "starts a PostgreSQL server")
	t.Parallel()
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	webAddr := web.Listener.Addr().String()
	pg := fmt.Sprintf("127.0.0.1:%d", pgtest.StartServer(t).Port)
	rude, nothing := faultproxy.HangUp(t), closedPort(t)
	for _, tc := range []struct {
		name, addr, want string
		is               error
	}{
		{"HTTP", webAddr, "goredis: redis " + webAddr + `: not a Redis server: it answers HTTP ("HTTP/1.0 404 Not Found")`, nil},
		{"PostgreSQL", pg, "goredis: redis " + pg + ": not a Redis server: it is a PostgreSQL server (use package postgres)", nil},
		{"hanging up", rude, "goredis: redis " + rude + ": not a Redis server, or one that wants TLS (the client's TLSConfig, or rediss://): it closes the connection without a reply", nil},
		{"nothing there", nothing, "goredis: redis " + nothing + " unreachable: dial tcp " + nothing + ": connect: connection refused", syscall.ECONNREFUSED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// No retries: a refused dial is then the client's error, not cut off by ctx.
			c := redis.NewClient(&redis.Options{Addr: tc.addr, MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { c.Close() })
			s, err := goredis.New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			err = acquireOnce(s)
			if err == nil || err.Error() != tc.want || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("Acquire: %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestRedisErrorsWithoutAPasswordSayOneIsWanted: a Store of either driver whose server wants a
// password it was not given says so, as the CLI does, whichever error the server answered: NOAUTH,
// or the protocol error Redis gives a long command from a connection that has not authenticated.
func TestRedisErrorsWithoutAPasswordSayOneIsWanted(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			s := mk(t, srv.Addr) // valkey-go connects now, before the password is asked
			if _, err := redistest.Do(srv.Addr, "CONFIG", "SET", "requirepass", "secret"); err != nil {
				t.Fatal(err)
			}
			// The Store's connections, made before, go; its new ones must authenticate.
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "secret"})
			defer admin.Close()
			if err := admin.ClientKillByFilter(t.Context(), "TYPE", "normal").Err(); err != nil {
				t.Fatal(err)
			}
			want := name + ": redis " + srv.Addr + ": authentication failed: the server wants a password and none was given (the client's Password option, or redis://[user]:password@host:port): "
			// The first call may meet a connection killed under it; then every call must say it.
			acquireOnce(s)
			for range 3 {
				if err := acquireOnce(s); err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("Acquire: %v\nwant an error starting %q", err, want)
				}
			}
		})
	}
}

// TestLossToARefusingServerNamesTheRefusal: a lease whose server stops taking connections (its
// address refuses them) is lost with a cause that names the refused connection, though the
// refreshes were cut off by their deadline while the client was still dialling: the loss wraps
// ErrLost, the deadline and the refusal. On valkey-go, which reports no dials, it names the
// refusal when a refresh got it back, and may say only the deadline.
func TestLossToARefusingServerNamesTheRefusal(t *testing.T) {
	t.Parallel()
	for name, mk := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			proxy := redistest.StartProxy(t, srv.Addr)
			m, err := primitives.NewMutex(mk(t, proxy.Addr), "refused", primitives.WithTTL(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			proxy.Close() // its connections close, and its address refuses new ones
			select {
			case <-l.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lease was not lost within 10s of its server's going")
			}
			err = l.Err()
			if name == "valkey" && errors.Is(err, core.ErrLost) && errors.Is(err, context.DeadlineExceeded) {
				// valkey-go tells the Store nothing of its dials: refreshes it kept waiting on a
				// reconnection until their ctx ended (on a loaded machine) cannot name the
				// refusal (docs/redis.md, "Connecting").
				return
			}
			want := "redis " + proxy.Addr + " unreachable: dial tcp " + proxy.Addr + ": connect: connection refused"
			if !errors.Is(err, core.ErrLost) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), want) {
				t.Errorf("Err() = %v\nwant ErrLost naming the refusal: %q", err, want)
			}
		})
	}
}
