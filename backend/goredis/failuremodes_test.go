package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/goredis"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/conformance/history"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/primitives"
)

// The failure modes of a holder (docs/failure-modes.md): the holder of a key stalls (SIGSTOP,
// as a long GC pause would), dies (SIGKILL), is cut off from Redis (a partition) or reaches it
// slowly (latency), while a second holder waits for the key. The first holder is a process of
// its own (this test binary run again: TestHolderProcess), so that it can be stopped, killed or
// cut off alone. Both holders work under their lease's context (primitives.LeaseContext) and
// write, every few milliseconds while they believe they hold, to a resource fenced by Redis
// itself (Store.Fenced). The checks, which the faults must never break: no write was accepted
// out of fence order (history.WritesInFenceOrder), and the writes in Redis rise. The figures,
// logged: how long the stale holder's work ran beside the next holder's (history.Overlap), how
// long before the next grant the stale holder was told of its loss, and how many of its writes
// Redis refused.

// failureMode is one way the first holder fails, for a config of the layers that stop it.
type failureMode struct {
	mode, layers string
	margin       time.Duration // below 0: the default
	delay        time.Duration
	bounded      bool // holderConfig.Bounded
	// viaProxy puts a fault proxy between the first holder and Redis.
	viaProxy bool
	// inject brings the fault about on the holder (h) or its proxy (px); heal ends it, after
	// faultFor.
	inject, heal func(h *holderProcess, px *redistest.Proxy)
}

// staleHolderFigures are one run's figures.
type staleHolderFigures struct {
	mode, layers string
	// overlap is how long the first holder's work ran beside the second's; toldBefore how long
	// before the second holder's grant the first was told of its loss (negative: after it);
	// wait how long the second holder waited from the fault to its grant.
	overlap, toldBefore, wait time.Duration
	// refused and failed count the stale holder's writes that Redis refused for their fence,
	// and that failed otherwise (cut off by the lease's context, say), of writes in all.
	refused, failed, writes int
}

const (
	faultTTL = time.Second
	faultFor = 2 * faultTTL // how long a pause or a partition lasts
)

func failureModes() []failureMode {
	stop := func(h *holderProcess, _ *redistest.Proxy) { pauseProcess(h.cmd.Process) }
	cont := func(h *holderProcess, _ *redistest.Proxy) { resumeProcess(h.cmd.Process) }
	kill := func(h *holderProcess, _ *redistest.Proxy) { h.cmd.Process.Kill() }
	hold := func(_ *holderProcess, px *redistest.Proxy) { px.Hold(true) }
	release := func(_ *holderProcess, px *redistest.Proxy) { px.Hold(false) }
	slow := func(_ *holderProcess, px *redistest.Proxy) { px.SetLatency(faultTTL * 3 / 10) }
	fast := func(_ *holderProcess, px *redistest.Proxy) { px.SetLatency(0) }
	var out []failureMode
	for _, l := range []struct {
		layers        string
		margin, delay time.Duration
		bounded       bool
	}{
		{"fence only (stop margin 0)", 0, 0, false},
		{"stop margin TTL/10 (default)", -1, 0, false},
		{"stop margin TTL/10, each write bounded by the lease's deadline", -1, 0, true},
		{"lock delay 2×TTL (stop margin 0)", 0, 2 * faultTTL, false},
	} {
		if !l.bounded { // a frozen or dead process's writes are bounded by nothing
			out = append(out,
				failureMode{mode: "pause (SIGSTOP 2×TTL)", layers: l.layers, margin: l.margin, delay: l.delay, inject: stop, heal: cont},
				failureMode{mode: "crash (SIGKILL)", layers: l.layers, margin: l.margin, delay: l.delay, inject: kill})
		}
		out = append(out,
			failureMode{mode: "partition (2×TTL)", layers: l.layers, margin: l.margin, delay: l.delay, bounded: l.bounded, viaProxy: true, inject: hold, heal: release},
			failureMode{mode: "slow network (0.3×TTL each way)", layers: l.layers, margin: l.margin, delay: l.delay, bounded: l.bounded, viaProxy: true, inject: slow, heal: fast},
		)
	}
	return out
}

// TestStaleHolderWritesNeverLandAfterTheNextHolders runs each failure mode of a holder under
// each set of layers (the fence alone, with stop margin 0; the default stop margin; a lock
// delay) and checks that Redis accepted no write out of fence order, whatever the stale holder
// did. It logs the figures of docs/failure-modes.md; the quick run has the fence alone,
// LEASEHOLD_SOAK=1 runs every set:
//
//	LEASEHOLD_SOAK=1 go test -run '^TestStaleHolderWritesNeverLandAfterTheNextHolders$' -v ./backend/goredis/
func TestStaleHolderWritesNeverLandAfterTheNextHolders(t *testing.T) {
	testenv.SkipShort(t, "stops, kills and cuts off a holder process for seconds")
	var figs []staleHolderFigures
	for i, fm := range failureModes() {
		if !testenv.Soak() && (fm.margin != 0 || fm.delay != 0 || fm.bounded) {
			continue // the quick run: the fence alone
		}
		t.Run(fm.mode+"/"+fm.layers, func(t *testing.T) {
			figs = append(figs, runFailureMode(t, fm, fmt.Sprint("stale-", i)))
		})
	}
	slices.SortStableFunc(figs, func(a, b staleHolderFigures) int { return strings.Compare(a.mode, b.mode) })
	var b strings.Builder
	fmt.Fprintf(&b, "| failure mode | layers | overlap | told of the loss before the next grant | next holder waited | stale writes refused / failed / writes |\n|---|---|---|---|---|---|\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "| %s | %s | %v | %v | %v | %d / %d / %d |\n", f.mode, f.layers, f.overlap.Round(time.Millisecond),
			f.toldBefore.Round(time.Millisecond), f.wait.Round(time.Millisecond), f.refused, f.failed, f.writes)
	}
	t.Logf("TTL %v; each row one run:\n%s", faultTTL, b.String())
}

// runFailureMode runs one failure mode and returns its figures.
func runFailureMode(t *testing.T, fm failureMode, key string) staleHolderFigures {
	srv := redistest.StartServer(t)
	cfg := holderConfig{Addr: srv.Addr, Key: key, TTL: faultTTL, Margin: fm.margin, Delay: fm.delay, Bounded: fm.bounded}
	var px *redistest.Proxy
	if fm.viaProxy {
		px = redistest.StartProxy(t, srv.Addr)
		cfg.Addr = px.Addr
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	next, err := primitives.NewMutex(s, key, append(cfg.options(), primitives.WithAcquireTimeout(time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}

	a := startHolder(t, cfg)
	poll.Until(t, "the first holder's first write accepted", func() bool { return a.accepted() > 0 || a.done() })
	if a.done() {
		t.Fatalf("the holder process exited: %s", a.stderr.String())
	}
	faultAt := time.Now()
	fm.inject(a, px)

	// The second holder: granted once the first's lease has passed (and its delay, if any),
	// it writes until the first holder's process has ended, and once more after.
	var rec history.Recorder
	granted := make(chan time.Time, 1)
	var bFrom, bTo time.Time
	var bFence uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		l, err := next.Acquire(context.Background())
		if err != nil {
			t.Error(err)
			granted <- time.Time{}
			return
		}
		bFrom, bFence = time.Now(), l.Fence()
		granted <- bFrom
		ctx, cancel := primitives.LeaseContext(context.Background(), l)
		defer cancel()
		for last := false; ctx.Err() == nil; {
			call := time.Now()
			err := fencedAppend(ctx, s, key, l.Fence())
			w := history.Write{Resource: key, Holder: "b", Fence: l.Fence(), Call: call, Return: time.Now(),
				Accepted: err == nil, Stale: errors.Is(err, core.ErrStaleFence)}
			switch {
			case w.Stale:
				t.Errorf("the next holder's write was refused: %v", err)
			case err != nil:
				w.Err = err // its lease's ctx canceled, on a machine stalled past its TTL
			}
			rec.AddWrite(w)
			if last {
				break
			}
			last = a.done()
			time.Sleep(5 * time.Millisecond)
		}
		bTo = time.Now()
		l.Release(context.Background())
	})
	if fm.heal != nil {
		// The fault lasts faultFor: its length is the scenario, not a wait for a condition.
		time.Sleep(time.Until(faultAt.Add(faultFor)))
		fm.heal(a, px)
	}
	poll.Until(t, "the first holder's process ended", a.done)
	wg.Wait()
	bAt := <-granted

	a.mu.Lock()
	aFrom, aTo, aLost, aFence := a.granted, a.stopped, a.lost, a.fence
	for _, w := range a.writes {
		rec.AddWrite(w)
	}
	stderr := a.stderr.String()
	failed := 0
	for _, w := range a.writes {
		if w.Err != nil {
			failed++
		}
	}
	a.mu.Unlock()
	if aTo.IsZero() { // killed: its work ended with it
		aTo, aLost = faultAt, faultAt
	}
	if bFence <= aFence {
		t.Errorf("the next holder's fence %d is not above the stale holder's %d", bFence, aFence)
	}
	ws := rec.Writes()
	if v := history.WritesInFenceOrder(ws); len(v) > 0 {
		t.Errorf("a stale write landed: %v\nholder's stderr: %s", v, stderr)
	}
	log, err := c.LRange(context.Background(), "log"+s.FenceTag(key), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var top uint64
	for _, v := range log {
		f, err := strconv.ParseUint(v, 10, 64)
		if err != nil || f < top {
			t.Errorf("Redis holds a write of fence %s after one of %d", v, top)
		}
		top = max(top, f)
	}
	rec.AddTenure(history.Tenure{Key: key, Holder: "a", Fence: aFence, From: aFrom, To: aTo})
	rec.AddTenure(history.Tenure{Key: key, Holder: "b", Fence: bFence, From: bFrom, To: bTo})
	f := staleHolderFigures{mode: fm.mode, layers: fm.layers, overlap: history.Overlap(rec.Tenures()),
		toldBefore: bAt.Sub(aLost), wait: bAt.Sub(faultAt), refused: history.Refused(ws), failed: failed, writes: len(ws)}
	t.Logf("overlap %v; the stale holder was told %v before the next grant; the next holder waited %v; of %d writes, %d refused as stale, %d failed",
		f.overlap.Round(time.Millisecond), f.toldBefore.Round(time.Millisecond), f.wait.Round(time.Millisecond), f.writes, f.refused, f.failed)
	return f
}

// TestLeaseIsTimedByTheMonotonicClockAndFencedByRedisTime: the holder's wall clock plays no
// part in a lease, so a jump of it (an NTP step, date -s) changes nothing: the lease's deadline
// carries Go's monotonic reading, which its timer, Done and the stop margin run on, and its
// fence is Redis's TIME in microseconds, the clock its expiry is decided by.
func TestLeaseIsTimedByTheMonotonicClockAndFencedByRedisTime(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, _ := primitives.NewMutex(s, "clock", primitives.WithTTL(faultTTL))
	ctx := context.Background()
	before := c.Time(ctx).Val()
	l, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	after := c.Time(ctx).Val()
	if d := l.Deadline().String(); !strings.Contains(d, " m=") {
		t.Errorf("the deadline %s has no monotonic reading: a jump of the wall clock would move it", d)
	}
	if f := l.Fence(); f < uint64(before.UnixMicro()) || f > uint64(after.UnixMicro()) {
		t.Errorf("fence %d is not Redis's time between %d and %d µs", f, before.UnixMicro(), after.UnixMicro())
	}
}
