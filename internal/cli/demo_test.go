package cli

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/core"
)

// shortDemo is a configuration that runs in well under a second.
func shortDemo() demoConfig {
	return demoConfig{workers: 6, limit: 3, duration: 800 * time.Millisecond, ttl: time.Second}
}

func TestDemoKeepsTheLimitsAndReportsTheLoss(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cfg := shortDemo()
	cfg.duration = 4 * time.Second // on a loaded machine (CI under -race), time for a worker to take the mutex too
	rep, err := runDemo(context.Background(), &out, cfg)
	text := out.String()
	if err != nil {
		t.Fatalf("runDemo: %v\n%s", err, text)
	}
	if rep.maxInUse < 1 || rep.maxInUse > cfg.limit {
		t.Errorf("the workers held at most %d permits at once, want 1..%d", rep.maxInUse, cfg.limit)
	}
	if rep.storeMaxInUse < 1 || rep.storeMaxInUse > cfg.limit {
		t.Errorf("the store counted at most %d permits at once, want 1..%d", rep.storeMaxInUse, cfg.limit)
	}
	if rep.maxLockHolders != 1 || rep.storeMaxLockHolders > 1 {
		t.Errorf("mutex holders at once: %d by the workers, %d by the store; want 1 and at most 1", rep.maxLockHolders, rep.storeMaxLockHolders)
	}
	if rep.poolAcquired < cfg.workers || rep.poolGrants != rep.poolAcquired || rep.lockGrants != rep.lockAcquired {
		t.Errorf("acquisitions %d and %d, grants %d and %d: want at least %d on the pool, and one grant per acquisition",
			rep.poolAcquired, rep.lockAcquired, rep.poolGrants, rep.lockGrants, cfg.workers)
	}
	if !rep.fencesIncreasing || !rep.leaseLost || len(rep.problems) > 0 {
		t.Errorf("fences increasing %v, lease lost %v, problems %q", rep.fencesIncreasing, rep.leaseLost, rep.problems)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ +[0-9.]+s +w1 +LOST +demo:pool +1 +[0-9]+ [ 0-9/]*\s+OnLost: leasehold: (hold|release) "demo:pool": lease lost`),
		regexp.MustCompile(`(?m)^ +[0-9.]+s +w1 +Release\(\) +demo:pool [ 0-9/]*\s+returned leasehold: release "demo:pool": lease lost`),
		regexp.MustCompile(`(?m)^ +[0-9.]+s +w[0-9] +acquired +demo:lock +1 +[0-9]+ +1 +1/1$`),
		regexp.MustCompile(`(?m)^  result +OK`),
	} {
		if !want.MatchString(text) {
			t.Errorf("output has no line matching %v:\n%s", want, text)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}

// overAdmitting is a broken store: it admits every request, whatever the limit.
type overAdmitting struct{ *memory.Store }

// Acquire admits req against a limit far above its own.
func (s overAdmitting) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	req.Limit = 1000
	return s.Store.Acquire(ctx, req)
}

func TestDemoFailsWhenTheStoreExceedsTheLimit(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cfg := demoConfig{workers: 4, limit: 1, duration: 400 * time.Millisecond, ttl: time.Second,
		newStore: func() core.Store { return overAdmitting{memory.New()} }}
	rep, err := runDemo(context.Background(), &out, cfg)
	if err == nil || !strings.Contains(out.String(), "result                 FAILED") {
		t.Fatalf("runDemo over a store that ignores the limit: err %v, want a failed check\n%s", err, out.String())
	}
	if rep.maxInUse <= cfg.limit || rep.storeMaxInUse <= cfg.limit {
		t.Errorf("the report says at most %d permits at once by the workers, %d by the store; want both above the limit %d",
			rep.maxInUse, rep.storeMaxInUse, cfg.limit)
	}
}

// fencesBackwards is a broken store: its fences decrease from grant to grant.
type fencesBackwards struct{ *memory.Store }

// Acquire returns the complement of the memory store's fence.
func (s fencesBackwards) Acquire(ctx context.Context, req core.AcquireRequest) (core.AcquireResult, error) {
	res, err := s.Store.Acquire(ctx, req)
	if res.Granted {
		res.Fence = ^res.Fence
	}
	return res, err
}

// Extend returns the complement of the memory store's fence, as Acquire did, so that refreshes
// agree with the grant.
func (s fencesBackwards) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	res, err := s.Store.Extend(ctx, req)
	res.Fence = ^res.Fence
	return res, err
}

// Release names the lease by the fence Acquire reported, so it takes the complement back.
func (s fencesBackwards) Release(ctx context.Context, req core.ReleaseRequest) (bool, error) {
	if req.Fence != 0 {
		req.Fence = ^req.Fence
	}
	return s.Store.Release(ctx, req)
}

func TestDemoFailsWhenFencesGoBackwards(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cfg := demoConfig{workers: 3, limit: 3, duration: 300 * time.Millisecond, ttl: time.Second,
		newStore: func() core.Store { return fencesBackwards{memory.New()} }}
	rep, err := runDemo(context.Background(), &out, cfg)
	if err == nil || rep.fencesIncreasing || !slices.ContainsFunc(rep.problems, func(p string) bool { return strings.Contains(p, "did not increase") }) {
		t.Errorf("runDemo over a store whose fences decrease: err %v, fences increasing %v, problems %q; want the fence check to fail\n%s",
			err, rep.fencesIncreasing, rep.problems, out.String())
	}
}

// cancelOnWrite is an io.Writer that cancels a context the first time it is written text
// containing trigger.
type cancelOnWrite struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	trigger string
	cancel  context.CancelFunc
}

// Write records p and cancels if p contains the trigger.
func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(p, []byte(w.trigger)) {
		w.cancel()
	}
	return w.buf.Write(p)
}

func TestDemoStopsWhenCanceled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelOnWrite{trigger: " acquired ", cancel: cancel}
	cfg := shortDemo()
	cfg.duration = time.Hour // only the cancel can end it in time
	rep, err := runDemo(ctx, w, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("runDemo canceled at the first grant: err %v, want one wrapping context.Canceled", err)
	}
	if len(rep.problems) > 0 || !strings.Contains(w.buf.String(), "(interrupted)") {
		t.Errorf("problems %q, want none and a summary saying it was interrupted:\n%s", rep.problems, w.buf.String())
	}
}

func TestDemoRejectsAnInvalidConfig(t *testing.T) {
	var out bytes.Buffer
	cfg := shortDemo()
	cfg.limit = 0
	if _, err := runDemo(context.Background(), &out, cfg); err == nil || !strings.Contains(err.Error(), "-limit 0") {
		t.Errorf("limit 0: err %v, want one naming -limit", err)
	}
	if out.Len() > 0 {
		t.Errorf("an invalid config printed %q", out.String())
	}
}

func TestGaugeKeepsItsPeak(t *testing.T) {
	var g gauge
	for _, step := range []struct{ add, cur, max int }{{2, 2, 2}, {1, 3, 3}, {-3, 0, 3}, {1, 1, 3}, {3, 4, 4}} {
		if cur := g.add(step.add); cur != step.cur || g.max() != step.max {
			t.Fatalf("add(%d) = %d, max %d; want %d, max %d", step.add, cur, g.max(), step.cur, step.max)
		}
	}

	var c gauge
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			c.add(1)
			c.add(-1)
		})
	}
	wg.Wait()
	if c.cur.Load() != 0 || c.max() < 1 || c.max() > 50 {
		t.Errorf("after 50 concurrent holds: count %d, peak %d; want 0 and 1..50", c.cur.Load(), c.max())
	}
}

func TestObservedStoreRecordsGrantsInOrder(t *testing.T) {
	ctx := context.Background()
	grant := func(s *observedStore, holder string, permits int) {
		t.Helper()
		res, err := s.Acquire(ctx, core.AcquireRequest{Key: "k", Holder: holder, Permits: permits, Limit: 3, TTL: time.Minute})
		if err != nil || !res.Granted {
			t.Fatalf("acquire for %s: %+v, %v", holder, res, err)
		}
	}

	good := observe(memory.New())
	grant(good, "a", 2)
	grant(good, "b", 1)
	if _, err := good.Release(ctx, core.ReleaseRequest{Key: "k", Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	grant(good, "c", 1)
	if r := good.record("k"); r.grants != 3 || r.backwards != 0 || r.peakInUse != 3 || r.peakHolders != 2 || r.maxFence != r.lastFence {
		t.Errorf("over the memory store: %+v; want 3 grants, none backwards, 3 permits and 2 holders at the peak", r)
	}

	bad := observe(fencesBackwards{memory.New()})
	grant(bad, "a", 1)
	grant(bad, "b", 1)
	if r := bad.record("k"); r.backwards != 1 || !strings.Contains(r.firstBad, "grant 2") {
		t.Errorf("over decreasing fences: %+v; want the second grant flagged", r)
	}
}

func TestDemoFitsIn100Columns(t *testing.T) {
	t.Parallel()
	many := shortDemo()
	many.workers, many.limit = 120, 40
	failing := demoConfig{workers: 4, limit: 1, duration: 400 * time.Millisecond, ttl: time.Second,
		newStore: func() core.Store { return overAdmitting{memory.New()} }}
	for name, cfg := range map[string]demoConfig{"default": shortDemo(), "120 workers": many, "failing": failing} {
		var out bytes.Buffer
		runDemo(context.Background(), &out, cfg)
		for i, line := range strings.Split(out.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > 100 {
				t.Errorf("%s: line %d has %d columns:\n%s", name, i+1, n, line)
			}
		}
	}
}

func TestDemoFencesAreShortAndFromTheFirst(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if _, err := runDemo(context.Background(), &out, shortDemo()); err != nil {
		t.Fatalf("runDemo: %v\n%s", err, out.String())
	}
	row := regexp.MustCompile(`(?m)^ +[0-9.]+s +w[0-9]+ +\S+ +demo:(pool|lock) +[0-9]+ +(-?[0-9]+) +[0-9]+ +[0-9]+/[0-9]+`)
	rows := row.FindAllStringSubmatch(out.String(), -1)
	if len(rows) < 10 || rows[0][2] != "0" {
		t.Fatalf("%d event lines, the first with fence %q; want 10 or more, the first with fence 0:\n%s", len(rows), rows[0][2], out.String())
	}
	for _, r := range rows {
		// The memory store's fences count microseconds: the run's span of them is under a
		// second.
		if len(r[2]) > 7 {
			t.Errorf("fence %s is not short:\n%s", r[2], r[0])
		}
	}
	if !regexp.MustCompile(`(?m)^ +shown less the first, [0-9]{10,}$`).MatchString(out.String()) {
		t.Errorf("the summary does not give the first fence:\n%s", out.String())
	}
}

func TestWrap(t *testing.T) {
	tests := []struct {
		text, first, rest string
		width             int
		want              []string
	}{
		{"a b c", "", "", 10, []string{"a b c"}},
		{"", "> ", "  ", 10, []string{"> "}},
		{"aaaa bbbb cccc", "> ", "  ", 9, []string{"> aaaa", "  bbbb", "  cccc"}},
		{"aaaa bb cccc", "> ", "  ", 9, []string{"> aaaa bb", "  cccc"}},
		{"ééé ààà", "", "", 3, []string{"ééé", "ààà"}},
		{"abcdefghij k", "- ", "  ", 6, []string{"- abcd", "  efgh", "  ij k"}},
	}
	for _, tc := range tests {
		if got := wrap(tc.text, tc.first, tc.rest, tc.width); !slices.Equal(got, tc.want) {
			t.Errorf("wrap(%q, %q, %q, %d) = %q, want %q", tc.text, tc.first, tc.rest, tc.width, got, tc.want)
		}
	}
}
