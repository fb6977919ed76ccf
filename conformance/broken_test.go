package conformance_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/conformance"
	"github.com/leasehold/leasehold/core"
)

// broken wraps a correct memory store with one deliberate fault.
type broken struct {
	*memory.Store
	fault string

	mu        sync.Mutex
	lastFence uint64
	grants    int
	late      sync.WaitGroup        // "grantsAfterGiveBack": the requests decided after their callers gave up
	limits    map[string]int        // "keepsLimitPastExpiry": each key's limit, until a release frees it
	freed     map[string]freedLimit // "freesLimitLate": the limit of a key its releases freed
}

// freedLimit is the limit a "freesLimitLate" store still holds a freed key to, until when.
type freedLimit struct {
	limit int
	until time.Time
}

func (b *broken) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	switch b.fault {
	case "freesLimitLate":
		// A single store that keeps a key's limit for 2 s after the releases that left the key
		// free, as if it finished them in the background: it did not say WithLateReleases.
		b.mu.Lock()
		f, ok := b.freed[req.Key]
		b.mu.Unlock()
		if ok && time.Now().Before(f.until) && f.limit != req.Limit {
			return core.AcquireResult{}, &core.LimitMismatchError{Held: f.limit, Requested: req.Limit}
		}
	case "keepsLimitPastExpiry":
		// A store that records the key's limit with its grants and forgets it only when a
		// release leaves the key free: leases that expire unreleased hold it for ever.
		b.mu.Lock()
		defer b.mu.Unlock()
		if held, ok := b.limits[req.Key]; ok && held != req.Limit {
			return core.AcquireResult{}, &core.LimitMismatchError{Held: held, Requested: req.Limit}
		}
		res, err := b.Store.Acquire(ctx, req)
		if err == nil && res.Granted {
			if b.limits == nil {
				b.limits = map[string]int{}
			}
			b.limits[req.Key] = req.Limit
		}
		return res, err
	case "grantsAfterGiveBack":
		// A store whose request, when its caller gives up before the store decides, is decided
		// all the same a moment later: after the caller's give-back, which found nothing.
		decide := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			decide.Stop()
			b.late.Go(func() {
				time.Sleep(10 * time.Millisecond)
				b.Store.Acquire(context.Background(), req)
			})
			return core.AcquireResult{}, ctx.Err()
		case <-decide.C:
		}
	case "ignoresLimit":
		req.Limit = 1 << 30
	case "admitsAgainstOwnLimit":
		// A store from before keys had one limit: each request is measured against its own. The
		// grant it makes past the key's limit is not recorded; the suite must not get that far.
		res, err := b.Store.Acquire(ctx, req)
		if !errors.Is(err, core.ErrLimitMismatch) {
			return res, err
		}
		snap, err := b.Store.Inspect(ctx, req.Key)
		if err != nil || len(snap.Leases) == 0 || snap.InUse()+req.Permits > req.Limit {
			return core.AcquireResult{RetryAfter: time.Second}, err
		}
		return core.AcquireResult{Granted: true, Fence: snap.Leases[len(snap.Leases)-1].Fence + 1}, nil
	case "neverExpires":
		req.TTL = 100 * 365 * 24 * time.Hour
	case "keepsFirstValue":
		if snap, err := b.Store.Inspect(ctx, req.Key); err == nil {
			for _, l := range snap.Leases {
				if l.Holder == req.Holder {
					req.Value = l.Value
				}
			}
		}
	case "truncatesValues":
		req.Value = req.Value[:min(len(req.Value), 255)]
	case "ignoresLockDelay":
		req.LockDelay = 0
	case "lineForgetsLockDelay":
		// A store that keeps a waiter's place without the delay its request asked for.
		if req.Wait > 0 {
			req.LockDelay = 0
		}
	}
	res, err := b.Store.Acquire(ctx, req)
	if b.fault == "overstatesTTL" && res.Granted {
		res.TTL = req.TTL + time.Second
	}
	if b.fault == "repeatsFence" && res.Granted {
		b.mu.Lock()
		// Every third grant repeats the fence of the grant before it.
		if b.grants++; b.grants%3 == 0 && b.lastFence != 0 {
			res.Fence = b.lastFence
		}
		b.lastFence = res.Fence
		b.mu.Unlock()
	}
	return res, err
}

func (b *broken) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if b.fault == "neverExpires" {
		req.TTL = 100 * 365 * 24 * time.Hour
	}
	return b.Store.Extend(ctx, req)
}

// Release by anyone ends the first lease on the key.
func (b *broken) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if b.fault == "anyoneReleases" {
		if snap, err := b.Store.Inspect(ctx, req.Key); err == nil && len(snap.Leases) > 0 {
			req.Holder, req.Fence = snap.Leases[0].Holder, snap.Leases[0].Fence
		}
	}
	if b.fault == "releasesByHolder" {
		req.Fence = 0
	}
	if b.fault == "freesLimitLate" {
		before, _ := b.Store.Inspect(ctx, req.Key)
		ok, err := b.Store.Release(ctx, req)
		if after, _ := b.Store.Inspect(ctx, req.Key); ok && len(after.Leases) == 0 && len(after.Waiters) == 0 {
			b.mu.Lock()
			if b.freed == nil {
				b.freed = map[string]freedLimit{}
			}
			b.freed[req.Key] = freedLimit{limit: before.Limit, until: time.Now().Add(2 * time.Second)}
			b.mu.Unlock()
		}
		return ok, err
	}
	if b.fault == "keepsLimitPastExpiry" {
		b.mu.Lock()
		defer b.mu.Unlock()
		ok, err := b.Store.Release(ctx, req)
		if snap, _ := b.Store.Inspect(ctx, req.Key); ok && len(snap.Leases) == 0 && len(snap.Waiters) == 0 {
			delete(b.limits, req.Key)
		}
		return ok, err
	}
	return b.Store.Release(ctx, req)
}

// Inspect, for "reversesLine", reports the line tail first.
func (b *broken) Inspect(ctx context.Context, key string) (core.Snapshot, error) {
	snap, err := b.Store.Inspect(ctx, key)
	if b.fault == "reversesLine" {
		slices.Reverse(snap.Waiters)
	}
	return snap, err
}

// Watch, for "watchesNothing", returns a watch that never hears of a change.
func (b *broken) Watch(ctx context.Context, key string) (core.Wake, error) {
	if b.fault == "watchesNothing" {
		return silent{}, nil
	}
	return b.Store.Watch(ctx, key)
}

func (b *broken) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	if b.fault == "floorsHeldLeases" {
		return b.Store.RaiseFence(ctx, req, floor)
	}
	return b.Store.AcquireAbove(ctx, req, floor)
}

func (b *broken) RaiseFence(ctx context.Context, req core.AcquireRequest, fence uint64) (core.AcquireResult, error) {
	if b.fault == "raisesNewGrantsOnly" {
		return b.Store.AcquireAbove(ctx, req, fence)
	}
	return b.Store.RaiseFence(ctx, req, fence)
}

// silent is a waiter that is never woken.
type silent struct{}

func (silent) C() <-chan struct{} { return nil }
func (silent) Reliable() bool     { return true }
func (silent) Close()             {}

func (b *broken) Register(ctx context.Context, req core.AcquireRequest) (core.Wake, error) {
	if b.fault == "forgetsToNotify" {
		return silent{}, nil
	}
	return b.Store.Register(ctx, req)
}

type brokenHarness struct {
	clock *core.ManualClock
	store *broken
}

// halfFenceRaiser is a wrapper that forwards AcquireAbove but forgot RaiseFence, so it is no
// core.FenceRaiser: redlock.New refuses it, and the suite must say so rather than skip.
type halfFenceRaiser struct {
	core.Store
	core.Notifier
	b *broken
}

func (h halfFenceRaiser) AcquireAbove(ctx context.Context, req core.AcquireRequest, floor uint64) (core.AcquireResult, error) {
	return h.b.AcquireAbove(ctx, req, floor)
}

// NewStore returns the broken store; for the fault "hidesNotifier", wrapped in a Store that
// forgot to forward Register; for "halfFenceRaiser", in one that forgot RaiseFence.
func (h brokenHarness) NewStore(*testing.T) core.Store {
	switch h.store.fault {
	case "hidesNotifier":
		return struct{ core.Store }{h.store}
	case "halfFenceRaiser":
		return halfFenceRaiser{h.store, h.store, h.store}
	}
	return h.store
}
func (h brokenHarness) Advance(d time.Duration) bool {
	h.clock.Advance(d)
	return true
}

// faults maps each deliberate fault to the suite tests that must catch it: the behaviour test
// written for it and, for faults of the store's state, the state machine on its own.
var faults = map[string][]string{
	"ignoresLimit":          {"AcquireGrantsUpToLimit", "StateMachine"},
	"anyoneReleases":        {"ReleaseOnlyByHolder", "StateMachine"},
	"releasesByHolder":      {"ReleaseEndsOneLease", "StateMachine"},
	"neverExpires":          {"ExpiryFreesPermits", "StateMachine"},
	"repeatsFence":          {"FencesStrictlyIncrease", "StateMachine", "CallsCutShortNeitherShareNorStrandAKey"},
	"grantsAfterGiveBack":   {"CallsCutShortNeitherShareNorStrandAKey"},
	"overstatesTTL":         {"AcquireGrantsUpToLimit"},
	"forgetsToNotify":       {"ReleaseWakesWaiter"},
	"hidesNotifier":         {"StoreIsNotifier", "ReleaseWakesWaiter"},
	"floorsHeldLeases":      {"AcquireAboveFloorsNewGrantsOnly"},
	"raisesNewGrantsOnly":   {"RaiseFenceRaisesHeldLeases"},
	"halfFenceRaiser":       {"AcquireAboveFloorsNewGrantsOnly", "RaiseFenceRaisesHeldLeases"},
	"keepsFirstValue":       {"LeasesKeepTheirValues", "StateMachine"},
	"truncatesValues":       {"LeasesKeepTheirValues", "StateMachine"},
	"reversesLine":          {"InspectListsTheLine"},
	"watchesNothing":        {"WatchSeesGrantsAndReleases"},
	"admitsAgainstOwnLimit": {"KeyHasOneLimit"},
	"keepsLimitPastExpiry":  {"ExpiryFreesTheKeysLimit"},
	"freesLimitLate":        {"KeyHasOneLimit"},
	"ignoresLockDelay":      {"LockDelayKeepsExpiredPermitsClosed", "LineWaitsOutTheLockDelay", "StateMachine"},
	"lineForgetsLockDelay":  {"LineWaitsOutTheLockDelay"},
	// Not a broken store but a wrong hookup: Run told WithoutNotifier about a store that has
	// notifications, which would skip their tests.
	"claimsNoNotifier": {"StoreIsNotifier"},
}

// TestBrokenStore runs the suite against the store named by LEASEHOLD_BROKEN. It is run, and
// expected to fail, by TestSuiteCatchesBrokenStores in a child process.
func TestBrokenStore(t *testing.T) {
	fault := os.Getenv("LEASEHOLD_BROKEN")
	if fault == "" {
		t.Skip("run by TestSuiteCatchesBrokenStores")
	}
	c := core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// The memory store wakes its waiters at once: a short wait is enough to tell a store that
	// does not (forgetsToNotify would otherwise spend the whole default wait in each notification
	// test).
	opts := []conformance.Option{conformance.WithWakeTimeout(500 * time.Millisecond), conformance.WithCutShortRun(300 * time.Millisecond)}
	if fault == "claimsNoNotifier" {
		opts = append(opts, conformance.WithoutNotifier())
	}
	b := &broken{Store: memory.New(memory.WithClock(c)), fault: fault}
	conformance.Run(t, brokenHarness{clock: c, store: b}, opts...)
	b.late.Wait()
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	if os.Getenv("LEASEHOLD_BROKEN") != "" {
		t.Skip("in a child process")
	}
	for fault, catchers := range faults {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			// Under -short the child runs only the checks that must catch the fault.
			run := "^TestBrokenStore$"
			if testing.Short() {
				run += "/^(" + strings.Join(catchers, "|") + ")$"
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+run, "-test.v", "-test.count=1",
				"-test.timeout=2m", "-rapid.nofailfile")
			cmd.Env = append(os.Environ(), "LEASEHOLD_BROKEN="+fault)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("conformance.Run passed a store that %s:\n%s", fault, out)
			}
			for _, catcher := range catchers {
				if want := "--- FAIL: TestBrokenStore/" + catcher + " "; !strings.Contains(string(out), want) {
					t.Errorf("conformance.Run failed a store that %s, but not in %s:\n%s", fault, catcher, out)
				}
			}
			var failed []string
			for _, line := range strings.Split(string(out), "\n") {
				if s := strings.TrimSpace(line); strings.HasPrefix(s, "--- FAIL: TestBrokenStore/") {
					failed = append(failed, strings.Fields(strings.TrimPrefix(s, "--- FAIL: TestBrokenStore/"))[0])
				}
			}
			t.Logf("a store that %s fails: %s", fault, strings.Join(failed, ", "))
		})
	}
}
