package goredis_test

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/primitives"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes, for a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLossOfAKilledRedisNamesIt measures, with the default TTL and refresh interval, how long
// after its redis-server is killed (SIGKILL, right after the grant: the worst case) a lease is
// reported lost, and checks that the loss and the log name the connection's failure. It runs a
// real redis-server for some ten seconds, so only with LEASEHOLD_MEASURE=1:
//
//	LEASEHOLD_MEASURE=1 go test -run TestLossOfAKilledRedisNamesIt -v ./backend/goredis
func TestLossOfAKilledRedisNamesIt(t *testing.T) {
	if os.Getenv("LEASEHOLD_MEASURE") == "" || testing.Short() {
		t.Skip("a measurement of about 10s: set LEASEHOLD_MEASURE=1")
	}
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	store, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	warned := make(chan time.Time, 1)
	m, err := primitives.NewMutex(store, "job", primitives.WithLogger(logger), primitives.WithEvents(func(e primitives.Event) {
		if e.Kind == primitives.EventRefreshFailed {
			select {
			case warned <- time.Now():
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	killed := time.Now()
	<-l.Done()
	took := time.Since(killed)
	err = l.Err()
	select {
	case at := <-warned:
		t.Logf("killed redis-server: first failed refresh logged after %v", at.Sub(killed).Round(time.Millisecond))
	default:
		t.Error("no refresh failed event")
	}
	t.Logf("killed redis-server: lease lost after %v (TTL %v, refresh every %v): %v", took.Round(time.Millisecond), primitives.DefaultTTL, primitives.DefaultTTL/3, err)
	t.Logf("log:\n%s", logs.String())
	if err == nil || !strings.Contains(err.Error(), "refreshes failed, last: ") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Err = %v, want the count of failed refreshes and the connection's failure", err)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"leasehold: lease refresh failed\"") {
		t.Errorf("no Warn record of the failed refresh")
	}
	l.Release(t.Context())
}
