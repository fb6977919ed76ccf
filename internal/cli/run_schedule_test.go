package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testenv"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
)

// flakyExtends is a store whose Extends fail once failing is set, and which records when the
// last one that succeeded was sent.
type flakyExtends struct {
	core.Store
	mu      sync.Mutex
	failing bool
	lastOK  time.Time // when the last Extend that succeeded was called
	oks     int
}

func (s *flakyExtends) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	sent := time.Now()
	s.mu.Lock()
	failing := s.failing
	s.mu.Unlock()
	if failing {
		return core.ExtendResult{}, errors.New("the network is down")
	}
	res, err := s.Store.Extend(ctx, req)
	if err == nil {
		s.mu.Lock()
		s.lastOK, s.oks = sent, s.oks+1
		s.mu.Unlock()
	}
	return res, err
}

// When refreshes fail, the command gets SIGTERM -grace before the lease's stop margin, counted
// back from its deadline, not when the lease is reported lost: with -ttl 8s and -grace 1.6s
// (TTL/5, the default), SIGTERM comes at the deadline less 2.4s, so by the last good refresh
// plus 5.6s; at the loss (the deadline less 0.8s) it would come 1.6s later. The command, which
// ignores it, gets SIGKILL at the loss, and run exits 75.
func TestRunTermsTheCommandGraceBeforeTheDeadlineWhenRefreshesFail(t *testing.T) {
	testenv.SkipShort(t, "lets refreshes fail until the deadline")
	store := &flakyExtends{Store: useMemoryStore(t)}
	inProcessStore = store
	termFile := filepath.Join(t.TempDir(), "term")
	s := start(t, "run", "-redis", memoryRedis, "-key", "flaky", "-ttl", "8s", "--", "sh", "-c",
		"trap 'date +%s%N > "+termFile+".tmp; mv "+termFile+".tmp "+termFile+"' TERM; while :; do sleep 0.05; done")
	poll.Until(t, "a refresh has succeeded", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.oks > 0
	})
	store.mu.Lock()
	store.failing = true
	store.mu.Unlock()

	data := poll.For(t, "the command to get SIGTERM", func() ([]byte, bool) {
		data, err := os.ReadFile(termFile)
		return data, err == nil
	})
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	lastOK := store.lastOK // the latest: an Extend under way as failing was set may have succeeded
	store.mu.Unlock()
	// The deadline is at most lastOK + 8s; SIGTERM is due 2.4s before it. Half of -grace is
	// left for scheduling delays: a SIGTERM at the loss would come 1.6s late.
	term := time.Unix(0, ns)
	if late := term.Sub(lastOK.Add(8*time.Second - 2400*time.Millisecond)); late > 800*time.Millisecond {
		t.Errorf("SIGTERM came %v after the last good refresh: %v later than -grace before the stop margin", term.Sub(lastOK), late)
	} else {
		t.Logf("SIGTERM %v after the last good refresh (due by 5.6s)", term.Sub(lastOK))
	}
	if code := s.exit(t); code != exitLost || !strings.Contains(s.err.String(), "not renewed in time") || !strings.Contains(s.err.String(), "SIGKILL") {
		t.Errorf("exit %d, stderr %q; want %d, and lines saying the lease was not renewed in time and SIGKILL followed", code, s.err.String(), exitLost)
	}
}

// -grace must fit within the TTL: SIGTERM comes at most TTL/2 before the deadline, so -grace is
// at most 2/5 of -ttl (the stop margin, TTL/10, takes the rest). A longer one is a usage error
// naming both flags and the bound, not silently shortened.
func TestRunGraceLongerThanTheTTLAllowsIsRefused(t *testing.T) {
	useMemoryStore(t)
	code, _, errOut := runArgs(t, t.Context(), "run", "-redis", memoryRedis, "-key", "g", "-ttl", "10s", "-grace", "5s", "--", "true")
	if code != exitUsage || !containsAll(errOut, []string{"-grace 5s", "at most 4s", "-ttl 10s", "raise -ttl to at least 12.5s"}) {
		t.Errorf("-ttl 10s -grace 5s: exit %d, stderr %q; want %d and a line naming both flags and the bound", code, errOut, exitUsage)
	}
	// A -grace no TTL allows (5/2 of it would overflow a duration): no -ttl is suggested.
	code, _, errOut = runArgs(t, t.Context(), "run", "-redis", memoryRedis, "-key", "g", "-ttl", "10s", "-grace", "2562047h", "--", "true")
	if code != exitUsage || !containsAll(errOut, []string{"-grace 2562047h", "at most 4s", "no -ttl allows it"}) || strings.Contains(errOut, "raise -ttl") {
		t.Errorf("-ttl 10s -grace 2562047h: exit %d, stderr %q; want %d and a line saying no -ttl allows it", code, errOut, exitUsage)
	}
	for _, args := range [][]string{{"-ttl", "10s", "-grace", "4s"}, {"-ttl", "10s"}, {"-ttl", "10s", "-grace", "0s"}} {
		code, _, errOut := runArgs(t, t.Context(), append(append([]string{"run", "-redis", memoryRedis, "-key", "g"}, args...), "--", "true")...)
		if code != exitOK {
			t.Errorf("%v: exit %d, stderr %q; want 0", args, code, errOut)
		}
	}
}

// acquireRecorder is a store that records the lock delay of every Acquire.
type acquireRecorder struct {
	core.Store
	mu     sync.Mutex
	delays []time.Duration
}

func (s *acquireRecorder) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	s.mu.Lock()
	s.delays = append(s.delays, req.LockDelay)
	s.mu.Unlock()
	return s.Store.Acquire(ctx, req)
}

// -lock-delay D asks the store to keep the key closed D after the lease expires unreleased
// (primitives.WithLockDelay): every Acquire carries it; without the flag, none. A negative one is
// a usage error.
func TestRunLockDelayGoesWithTheAcquire(t *testing.T) {
	store := &acquireRecorder{Store: useMemoryStore(t)}
	inProcessStore = store
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"run", "-redis", memoryRedis, "-key", "d", "-lock-delay", "3s", "--", "true"}, 3 * time.Second},
		{[]string{"run", "-redis", memoryRedis, "-key", "d", "--", "true"}, 0},
		{[]string{"elect", "-redis", memoryRedis, "-lock-delay", "2s", "d", "v", "--", "true"}, 2 * time.Second},
	} {
		store.mu.Lock()
		store.delays = nil
		store.mu.Unlock()
		code, _, errOut := runArgs(t, t.Context(), tc.args...)
		store.mu.Lock()
		delays := store.delays
		store.mu.Unlock()
		if code != exitOK || len(delays) == 0 {
			t.Fatalf("%v: exit %d, stderr %q, %d acquires", tc.args, code, errOut, len(delays))
		}
		for _, d := range delays {
			if d != tc.want {
				t.Errorf("%v: an Acquire with lock delay %v, want %v", tc.args, d, tc.want)
			}
		}
	}
	code, _, errOut := runArgs(t, t.Context(), "run", "-redis", memoryRedis, "-key", "d", "-lock-delay", "-1s", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "-lock-delay -1s") {
		t.Errorf("-lock-delay -1s: exit %d, stderr %q; want %d naming the flag", code, errOut, exitUsage)
	}
}

// While refreshes succeed, every one moves the stop's schedule on: a command that runs for
// several TTLs is never stopped, under run as under elect.
func TestRunCommandOutlivingSeveralTTLsIsNotStopped(t *testing.T) {
	testenv.SkipShort(t, "runs commands for several TTLs")
	t.Parallel()
	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	// -ttl 3s, not less: the first stop time must leave a loaded machine time to start the
	// supervisor (a race-detector binary) and send it the first refresh's schedule.
	var wg sync.WaitGroup
	for _, args := range [][]string{
		{"run", "-redis", url, "-key", "long", "-ttl", "3s", "--", "sleep", "8"},
		{"elect", "-redis", url, "-ttl", "3s", "longer", "v", "--", "sleep", "8"},
	} {
		wg.Go(func() {
			cmd := cli(t.Context(), args...)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("%s -ttl 3s -- sleep 8: exit %d, output %q; want 0", args[0], code, out)
			}
		})
	}
	wg.Wait()
}
