package goredis_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/primitives"
)

// The stale holder of the failure-mode tests (failuremodes_test.go): this test binary run again
// as a process of its own, so that a test can stop, kill or cut it off alone, and what it
// reports.

// holderConfig is what TestHolderProcess is asked to do, as JSON in holderEnv.
type holderConfig struct {
	Addr   string // the Redis it reaches: through a proxy for the network faults
	Key    string
	TTL    time.Duration
	Margin time.Duration // below 0: the default stop margin (TTL/10)
	Delay  time.Duration // the lock delay
	// Bounded gives each write a deadline, the lease's, and sets go-redis's
	// ContextTimeoutEnabled, so that a write in flight ends by then. Otherwise a write waiting
	// for its reply ends by the client's read timeout (3s), whatever its context: go-redis
	// applies a context's deadline to a read, not its cancellation.
	Bounded bool
}

func (c holderConfig) options() []primitives.Option {
	opts := []primitives.Option{primitives.WithTTL(c.TTL), primitives.WithLockDelay(c.Delay)}
	if c.Margin >= 0 {
		opts = append(opts, primitives.WithStopMargin(c.Margin))
	}
	return opts
}

const holderEnv = "LEASEHOLD_TEST_HOLDER"

// TestHolderProcess is not a test of its own: it is the first holder of the failure-mode
// tests, run by them as a process of its own. It acquires the key, writes under its lease's
// context until that is canceled, and reports on stdout, one line each: "holder granted FENCE
// T", "holder write CALL RETURN ok|stale|error", "holder lost T" (Done closed), "holder stopped
// T" (its work saw the context canceled); times are Unix nanoseconds.
func TestHolderProcess(t *testing.T) {
	spec := os.Getenv(holderEnv)
	if spec == "" {
		t.Skip("the holder of the failure-mode tests, run by them as a process of its own")
	}
	var cfg holderConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatal(err)
	}
	say := func(words ...any) { fmt.Println(append([]any{"holder"}, words...)...) }
	c := redis.NewClient(&redis.Options{Addr: cfg.Addr, ContextTimeoutEnabled: cfg.Bounded})
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := primitives.NewMutex(s, cfg.Key, cfg.options()...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	say("granted", l.Fence(), time.Now().UnixNano())
	told := make(chan struct{})
	go func() {
		<-l.Done()
		say("lost", time.Now().UnixNano())
		close(told)
	}()
	ctx, cancel := primitives.LeaseContext(context.Background(), l)
	defer cancel()
	for ctx.Err() == nil {
		call := time.Now()
		wctx, wcancel := ctx, context.CancelFunc(func() {})
		if cfg.Bounded {
			wctx, wcancel = context.WithDeadline(ctx, l.Deadline())
		}
		err := fencedAppend(wctx, s, cfg.Key, l.Fence())
		wcancel()
		say("write", call.UnixNano(), time.Now().UnixNano(), outcome(err))
		time.Sleep(5 * time.Millisecond) // the work between two writes
	}
	say("stopped", time.Now().UnixNano())
	<-told
	// As Do would: release, which sends nothing for a lease reported lost but waits for the
	// release the lease sends itself after failed refreshes (a refresh may have reached Redis).
	rctx, rcancel := context.WithTimeout(context.Background(), cfg.TTL)
	l.Release(rctx)
	rcancel()
	os.Exit(0) // the process ends here, as the stale holder's would
}

// fencedAppend appends fence to resource's log in Redis, fenced by s.Fenced.
func fencedAppend(ctx context.Context, s *goredis.Store, resource string, fence uint64) error {
	return s.Fenced(ctx, resource, fence, func(pipe redis.Pipeliner) error {
		pipe.RPush(ctx, "log"+s.FenceTag(resource), fence)
		return nil
	})
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, core.ErrStaleFence):
		return "stale"
	}
	return "error"
}

// holderProcess is a running TestHolderProcess and what it has reported.
type holderProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}

	mu      sync.Mutex
	fence   uint64
	granted time.Time
	lost    time.Time
	stopped time.Time
	writes  []history.Write
	stderr  strings.Builder
}

// startHolder runs TestHolderProcess with cfg; it is killed, if it still runs, when t ends.
func startHolder(t *testing.T, cfg holderConfig) *holderProcess {
	t.Helper()
	spec, _ := json.Marshal(cfg)
	h := &holderProcess{exited: make(chan struct{})}
	h.cmd = exec.Command(os.Args[0], "-test.run=^TestHolderProcess$", "-test.count=1")
	h.cmd.Env = append(os.Environ(), holderEnv+"="+string(spec))
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.cmd.Stderr = &lockedWriter{mu: &h.mu, w: &h.stderr}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.report(t, cfg.Key, strings.Fields(sc.Text()))
		}
		h.cmd.Wait()
	}()
	t.Cleanup(func() {
		resumeProcess(h.cmd.Process) // a stopped process is not killed until continued
		h.cmd.Process.Kill()
		<-h.exited
	})
	return h
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// report takes one line of the holder's report.
func (h *holderProcess) report(t *testing.T, key string, f []string) {
	if len(f) < 3 || f[0] != "holder" {
		return // the test binary's own output
	}
	at := func(s string) time.Time {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Errorf("holder's report %v: %v", f, err)
		}
		return time.Unix(0, n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch f[1] {
	case "granted":
		h.fence, _ = strconv.ParseUint(f[2], 10, 64)
		h.granted = at(f[3])
	case "lost":
		h.lost = at(f[2])
	case "stopped":
		h.stopped = at(f[2])
	case "write":
		w := history.Write{Resource: key, Holder: "a", Fence: h.fence, Call: at(f[2]), Return: at(f[3])}
		w.Accepted, w.Stale = f[4] == "ok", f[4] == "stale"
		if f[4] == "error" {
			w.Err = errors.New("the write failed")
		}
		h.writes = append(h.writes, w)
	}
}

// accepted returns how many of the holder's writes Redis has accepted so far.
func (h *holderProcess) accepted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, w := range h.writes {
		if w.Accepted {
			n++
		}
	}
	return n
}

// done reports whether the process has exited.
func (h *holderProcess) done() bool {
	select {
	case <-h.exited:
		return true
	default:
		return false
	}
}
