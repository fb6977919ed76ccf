package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// wakeTimeout bounds how long the suite waits for a notification to arrive, or a waiter or a
// watch to become reliable. A store that notifies costs only the time its notification takes; the
// bound is generous because a loaded machine stalls a process for seconds.
const wakeTimeout = 10 * time.Second

// Run runs the whole conformance suite against the backend h connects to, as subtests of t.
//
// The optional capabilities are checked when the Store has them: core.FenceRaiser's and
// core.Watcher's tests are skipped without them (only a Redlock node needs it), and fail a Store
// that has one of its methods but not the interface (a wrapper that forgot the other). A Store
// without core.Notifier fails the notification tests with a message saying so, unless Run is told
// WithoutNotifier: a wrapper that forgets to forward Register would otherwise leave every waiter
// polling unnoticed.
func Run(t *testing.T, h Harness, opts ...Option) {
	t.Helper()
	s := newSuite(h, opts)
	tests := []struct {
		name  string
		fn    func(t *testing.T)
		clock bool // it moves the backend's clock (elapse, or the state machine's advance)
	}{
		// The longest first, so that the others run beside them.
		{"StateMachine", s.testStateMachine, true},
		{"ConcurrentHoldersNeverExceedLimit", s.testConcurrentHoldersNeverExceedLimit, false},
		{"CallsCutShortNeitherShareNorStrandAKey", s.testCallsCutShortNeitherShareNorStrandAKey, false},
		{"AcquireGrantsUpToLimit", s.testAcquireGrantsUpToLimit, false},
		{"WeightedAcquiresShareKeySpace", s.testWeightedAcquiresShareKeySpace, false},
		{"RefusalReportsRetryAfter", s.testRefusalReportsRetryAfter, false},
		{"AcquireIsIdempotentPerHolder", s.testAcquireIsIdempotentPerHolder, false},
		{"KeyHasOneLimit", s.testKeyHasOneLimit, false},
		{"ExpiryFreesTheKeysLimit", s.testExpiryFreesTheKeysLimit, true},
		{"ExtendOnlyByHolder", s.testExtendOnlyByHolder, false},
		{"ExtendSetsExpiryFromNow", s.testExtendSetsExpiryFromNow, true},
		{"ReleaseOnlyByHolder", s.testReleaseOnlyByHolder, false},
		{"ReleaseEndsOneLease", s.testReleaseEndsOneLease, true},
		{"ExpiryFreesPermits", s.testExpiryFreesPermits, true},
		{"FencesStrictlyIncrease", s.testFencesStrictlyIncrease, true},
		{"AcquireAboveFloorsNewGrantsOnly", s.testAcquireAboveFloorsNewGrantsOnly, false},
		{"RaiseFenceRaisesHeldLeases", s.testRaiseFenceRaisesHeldLeases, false},
		{"InspectReportsLeases", s.testInspectReportsLeases, false},
		{"LeasesKeepTheirValues", s.testLeasesKeepTheirValues, false},
		{"InspectListsTheLine", s.testInspectListsTheLine, false},
		{"LineGrantsCarryTheWaitersValue", s.testLineGrantsCarryTheWaitersValue, false},
		{"ValuesThatLookLikeAFormat", s.testValuesThatLookLikeAFormat, false},
		{"WatchSeesGrantsAndReleases", s.testWatchSeesGrantsAndReleases, false},
		{"KeysAreIndependent", s.testKeysAreIndependent, false},
		{"CanceledContextChangesNothing", s.testCanceledContextChangesNothing, false},
		{"StoreIsNotifier", s.testStoreIsNotifier, false},
		{"ReleaseWakesWaiter", s.testReleaseWakesWaiter, false},
		{"ReleaseWakesOneWaiterPerPermit", s.testReleaseWakesOneWaiterPerPermit, false},
		{"LineIsStrictlyFIFO", s.testLineIsStrictlyFIFO, false},
		{"UnusedWakeIsPassedOn", s.testUnusedWakeIsPassedOn, false},
		{"LockDelayKeepsExpiredPermitsClosed", s.testLockDelayKeepsExpiredPermitsClosed, true},
		{"LockDelayNotAfterRelease", s.testLockDelayNotAfterRelease, false},
		{"LockDelayEnds", s.testLockDelayEnds, true},
		{"LineWaitsOutTheLockDelay", s.testLineWaitsOutTheLockDelay, true},
		{"LockDelayOfTheLongestDuration", s.testLockDelayOfTheLongestDuration, true},
	}
	// The tests use keys of their own, so they run at once, each as a subtest of t, and most of
	// what they cost is waiting (for a server's reply, a notification, a TTL on real time). Run
	// returns when all have ended. A test that moves a harness's clock runs alone, after the
	// others: moving the clock would expire or shorten their leases under them.
	var later []func()
	sem := make(chan struct{}, concurrentTests)
	var wg sync.WaitGroup
	for _, tc := range tests {
		if tc.clock && s.manual {
			later = append(later, func() { t.Run(tc.name, tc.fn) })
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t.Run(tc.name, tc.fn)
		}()
	}
	wg.Wait()
	for _, run := range later {
		run()
	}
}

func newSuite(h Harness, opts []Option) *suite {
	s := &suite{h: h, manual: h.Advance(0), wake: wakeTimeout}
	for _, o := range opts {
		o(s)
	}
	return s
}

// stressRounds is how many rounds each worker of the stress test makes.
func (s *suite) stressRounds() int {
	if s.soak {
		return 40
	}
	return 20
}

// cutShortLength is how long the check of calls cut short makes its calls.
func (s *suite) cutShortLength() time.Duration {
	switch {
	case s.cutShortRun > 0:
		return s.cutShortRun
	case testing.Short():
		return 300 * time.Millisecond
	case s.soak:
		return 3 * time.Second
	}
	return time.Second
}

// concurrentTests is how many of the suite's tests Run runs at once: enough to overlap their
// waits, few enough that a backend's connections (a pool per Store) stay well within a server's
// limits.
const concurrentTests = 6

// Option changes what Run expects of a Store.
type Option func(*suite)

// WithoutNotifier tells Run that the Store has no notifications by design (it does not implement
// core.Notifier: its waiters retry at their retry interval, as over Redlock). Run then skips the
// notification tests instead of failing them, and fails if the Store is a core.Notifier after all.
func WithoutNotifier() Option {
	return func(s *suite) { s.noNotifier = true }
}

// WithLateReleases tells Run that the Store may finish a release it has decided after Release
// returns (as Redlock does on the nodes that answer after its quorum): a request on a key whose
// leases in its way were just released may meet them until then (refused, or refused their
// limit), and the tests that acquire right after a release ask again. Without it the first
// such request must be granted.
func WithLateReleases() Option {
	return func(s *suite) { s.lateReleases = true }
}

// WithSharedFencesUnderContention tells Run that the Store may give two grants on a key one
// fence when calls on the key race (reason says why): the check of calls cut short then logs such
// a pair instead of failing. It is a known defect's mark, not a mode: a Store fixed drops it.
func WithSharedFencesUnderContention(reason string) Option {
	return func(s *suite) { s.sharedFences = reason }
}

// WithResolution tells Run that the Store keeps time in steps of d: it rounds each TTL and lock
// delay up to a whole number of steps, and its leases end up to d after that (etcd counts lease
// TTLs in whole seconds and checks for expiry twice a second). A lease never ends early; it may
// end late by up to d. Run then waits d longer wherever it waits for an expiry on real time,
// accepts a TTL or delay that Inspect reports up to d longer than the model's, and a RetryAfter
// up to d shorter than the time the leases in the way have left.
func WithResolution(d time.Duration) Option {
	return func(s *suite) { s.resolution = d }
}

// WithSoak tells Run, when soak is true, to run its two load checks at soak length, for a run
// with time to spare (a nightly or CI job): the stress test's workers make 40 rounds each instead
// of 20, and the check of calls cut short makes its calls for 3 s instead of 1 s. Without it, or
// with false, they run at the length that keeps the whole suite within seconds on a memory store;
// under -short the check of calls cut short runs for 300 ms whatever soak says. Leasehold's own
// tests pass true under LEASEHOLD_SOAK=1; the suite reads no environment variable itself.
func WithSoak(soak bool) Option {
	return func(s *suite) { s.soak = soak }
}

type suite struct {
	resolution   time.Duration // WithResolution: a lease may end this much after its TTL
	soak         bool          // WithSoak: the load checks run at soak length
	h            Harness
	manual       bool          // the backend's time can be moved
	noNotifier   bool          // WithoutNotifier: the Store is meant to have no notifications
	lateReleases bool          // WithLateReleases: a decided release may end after Release returns
	sharedFences string        // WithSharedFencesUnderContention: why racing grants may share a fence
	wake         time.Duration // how long to wait for a notification: wakeTimeout but in the suite's own tests
	cutShortRun  time.Duration // how long the check of calls cut short runs its calls: 0, its own choice
}

// elapse lets d pass on the backend's clock: moved if the harness can, waited for if not.
func (s *suite) elapse(d time.Duration) {
	if !s.h.Advance(d) {
		time.Sleep(d + s.resolution)
	}
}

// realTimeTTL is the shortest TTL the suite grants on real time. A lease meant to expire is
// granted for d on a harness whose clock the suite moves, and for at least this long on real
// time: a store's grant must come while its TTL lasts (Redlock refuses one whose nodes answered
// after it), and on a loaded machine, with the suite's tests running at once, a 50 ms TTL could
// end before the reply. The tests that wait out such a TTL run at once, so they wait 2 s in all.
const realTimeTTL = time.Second

// shortTTL returns the TTL for a lease the test means to expire: d, or realTimeTTL on real time.
func (s *suite) shortTTL(d time.Duration) time.Duration {
	if s.manual {
		return d
	}
	return max(d, realTimeTTL)
}

// newKey returns a key no other test uses, on any run against the same backend.
func newKey(t *testing.T) string {
	var b [8]byte
	rand.Read(b[:])
	return "conformance:" + t.Name() + ":" + hex.EncodeToString(b[:])
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// keyAt is one test's key on one of its Stores, with the calls the tests make there, each
// failing the test on an error.
type keyAt struct {
	t   *testing.T
	st  core.Store
	key string
}

func at(t *testing.T, st core.Store, key string) keyAt { return keyAt{t: t, st: st, key: key} }

func (k keyAt) request(holder string, permits, limit int, ttl time.Duration) core.AcquireRequest {
	return core.AcquireRequest{Key: k.key, Holder: holder, Permits: permits, Limit: limit, TTL: ttl}
}

func (k keyAt) acquire(holder string, permits, limit int, ttl time.Duration) core.AcquireResult {
	k.t.Helper()
	res, err := k.st.Acquire(ctxFor(k.t), k.request(holder, permits, limit, ttl))
	if err != nil {
		k.t.Fatalf("Acquire(%q, holder %q, permits %d, limit %d): %v", k.key, holder, permits, limit, err)
	}
	if res.TTL < 0 || res.TTL > ttl || (!res.Granted && res.TTL != 0) {
		// A store may say a grant has less than its TTL left (core.AcquireResult.TTL), never more.
		k.t.Fatalf("Acquire(%q, holder %q) granted %v with TTL %v, want 0 or at most the request's %v", k.key, holder, res.Granted, res.TTL, ttl)
	}
	return res
}

// grant acquires and fails the test unless granted; it returns the fence.
func (k keyAt) grant(holder string, permits, limit int, ttl time.Duration) uint64 {
	k.t.Helper()
	res := k.acquire(holder, permits, limit, ttl)
	if !res.Granted {
		k.t.Fatalf("Acquire(%q, holder %q, permits %d, limit %d) refused (retry after %v), want granted", k.key, holder, permits, limit, res.RetryAfter)
	}
	if res.Fence == 0 {
		k.t.Fatalf("Acquire(%q, holder %q) granted with fence 0", k.key, holder)
	}
	return res.Fence
}

// refuse acquires and fails the test if granted; it returns the refusal's RetryAfter.
func (k keyAt) refuse(holder string, permits, limit int, ttl time.Duration) time.Duration {
	k.t.Helper()
	res := k.acquire(holder, permits, limit, ttl)
	if res.Granted {
		k.t.Fatalf("Acquire(%q, holder %q, permits %d, limit %d) granted (fence %d), want refused", k.key, holder, permits, limit, res.Fence)
	}
	return res.RetryAfter
}

// release releases holder's lease whatever its fence (the suite's holder ids each name one
// lease at a time); releaseFence names the fence too.
func (k keyAt) release(holder string) bool {
	k.t.Helper()
	return k.releaseFence(holder, 0)
}

func (k keyAt) releaseFence(holder string, fence uint64) bool {
	k.t.Helper()
	ok, err := k.st.Release(ctxFor(k.t), core.ReleaseRequest{Key: k.key, Holder: holder, Fence: fence})
	if err != nil {
		k.t.Fatalf("Release(%q, holder %q, fence %d): %v", k.key, holder, fence, err)
	}
	return ok
}

func inspect(t *testing.T, st core.Store, key string) core.Snapshot {
	t.Helper()
	snap, err := st.Inspect(ctxFor(t), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return snap
}

func holders(snap core.Snapshot) map[string]core.LeaseInfo {
	m := make(map[string]core.LeaseInfo, len(snap.Leases))
	for _, l := range snap.Leases {
		m[l.Holder] = l
	}
	return m
}
