package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/primitives"
)

// The TestRedisValue tests check lease values and the line of waiters end to end on a real
// redis-server (see redisWithValues).

// redisWithValues returns a goredis store on the server at addr, closed when the test ends,
// once it has checked that the driver keeps lease values and reports waiters in Inspect: the
// tests' failures then point at the command, not the driver.
func redisWithValues(t *testing.T, addr string) core.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	store, err := goredis.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	const key = "values-probe"
	sem, err := primitives.NewSemaphore(store, key, 1, primitives.WithTTL(time.Minute), primitives.WithValue("probe"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := sem.Acquire(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		if l, err := sem.Acquire(ctx, 1); err == nil {
			l.Release(context.Background())
		}
	}()
	defer func() { cancel(); <-waiting }()
	snap := poll.For(t, "the probe's waiter in line", func() (core.Snapshot, bool) {
		snap, err := store.Inspect(ctx, key)
		return snap, err == nil && len(snap.Waiters) == 1
	})
	if len(snap.Leases) != 1 || snap.Leases[0].Value != "probe" || snap.Waiters[0].Value != "probe" {
		t.Fatalf("the Redis driver does not keep the probe's values: %+v", snap)
	}
	return store
}

func TestRedisValueRunDefaultAndWaitersShownByInspect(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	store := redisWithValues(t, srv.Addr)
	url := "redis://" + srv.Addr
	var out syncBuffer
	holder, stdin := startCLI(t, &out, "run", "-redis", url, "-key", "deploy", "--", "sh", "-c", "read x; exit 0")
	waitInspect(t, url, "deploy", "1", "1 holder(s)")
	host, _ := os.Hostname()
	want := fmt.Sprintf("%s pid %d: sh -c 'read x; exit 0'", host, holder.pid)
	if snap, err := store.Inspect(t.Context(), "deploy"); err != nil || len(snap.Leases) != 1 || snap.Leases[0].Value != want {
		t.Errorf("Redis keeps %+v (%v); want one lease of value %q", snap.Leases, err, want)
	}

	var wout syncBuffer
	waiter, _ := startCLI(t, &wout, "run", "-redis", url, "-key", "deploy", "-value", "next\njob", "--", "true")
	waitInspect(t, url, "deploy", "1", "1 waiting, first served first:")
	waitInspect(t, url, "deploy", "1", `"next\njob"`)
	stdin.Close()
	for _, p := range []*cliProcess{holder, waiter} {
		if code := <-p.done; code != exitOK {
			t.Errorf("exit %d; output %q %q", code, out.String(), wout.String())
		}
	}
}

func TestRedisValueObservedByElect(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	redisWithValues(t, srv.Addr)
	url := "redis://" + srv.Addr
	var obs, out syncBuffer
	startCLI(t, &obs, "elect", "-redis", url, "-observe", "job")
	poll.For(t, "no leader at first", outputOf(&obs, lines(1)))
	_, stdin := startCLI(t, &out, "elect", "-redis", url, "job", "host-a: deploy", "--", "sh", "-c", "read x")
	got := parseObserved(t, poll.For(t, "a leader", outputOf(&obs, lines(2))))
	if got[1].value != `"host-a: deploy"` {
		t.Errorf("observed %+v, want the leader's value \"host-a: deploy\"", got)
	}
	stdin.Close()
}

func TestInspectSaysRedlockKeepsNoLine(t *testing.T) {
	t.Parallel()
	var flags []string
	for range 3 {
		flags = append(flags, "-redis", redistest.StartServer(t).Addr)
	}
	code, out, errOut := runArgs(t, t.Context(), append(append([]string{"inspect"}, flags...), "k")...)
	if code != exitOK || errOut != "" || !strings.HasSuffix(out, "\nno line of waiters over Redlock (several -redis servers)\n") {
		t.Errorf("inspect over Redlock: exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}
