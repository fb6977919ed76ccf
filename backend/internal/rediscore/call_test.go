package rediscore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// collidingKeys returns n keys that c keeps in one slot, and n that it keeps in others.
func collidingKeys(c *nameCache, n int) (same, others []string) {
	slot := -1
	for i := 0; len(same) < n || len(others) < n; i++ {
		k := fmt.Sprintf("k{%d}%%", i)
		s := int(maphash.String(c.seed, k) % nameSlots)
		switch {
		case slot < 0:
			slot = s
			same = append(same, k)
		case s == slot && len(same) < n:
			same = append(same, k)
		case s != slot && len(others) < n:
			others = append(others, k)
		}
	}
	return same, others
}

// TestNameCacheGivesEachKeyItsOwnNames: keys that share a slot, asked for by many goroutines at
// once, each get their own Redis keys and channels, never another key's (which would make two
// keys share one lease).
func TestNameCacheGivesEachKeyItsOwnNames(t *testing.T) {
	l, _ := newLayout("p:")
	c := &nameCache{seed: maphash.MakeSeed()}
	same, others := collidingKeys(c, 8)
	keys := append(same, others...)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				key := keys[(g+i*7)%len(keys)]
				n := c.get(l, key)
				if n.key != key || len(n.keys) != 4 || n.keys[0] != l.keys(key)[0] {
					t.Errorf("names of %q: %+v", key, n)
					return
				}
				for j, k := range l.keys(key) {
					if n.keys[j] != k {
						t.Errorf("key %d of %q: %v, want %q", j, key, n.keys[j], k)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestDurationsNeverSendAStaleValue: TTLs and waits that share a slot, zero, negative and the
// longest, boxed by many goroutines at once, are each sent as their own ms.
func TestDurationsNeverSendAStaleValue(t *testing.T) {
	var d durations
	ds := []time.Duration{0, -time.Second, time.Nanosecond, time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond,
		16*time.Millisecond + 1, 24 * time.Millisecond, time.Second, 8 * time.Second, math.MaxInt64,
		math.MaxInt64 - 8*time.Millisecond, math.MinInt64}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 5000 {
				v := ds[(g*3+i)%len(ds)]
				keep := (g+i)%2 == 0
				if got := d.box(v, keep); got != any(ms(v)) {
					t.Errorf("box(%v, %v) = %v (%T), want %d", v, keep, got, got, ms(v))
					return
				}
			}
		})
	}
	wg.Wait()
	if got, want := d.box(math.MaxInt64, true), int64(math.MaxInt64/int64(time.Millisecond)+1); got != any(want) {
		t.Fatalf("the longest duration: %v, want %d (rounded up)", got, want)
	}
}

// recorder is an Adapter that checks and keeps every Call, as a driver that keeps the slices it is
// handed (go-redis's hooks and pipelines) would, and reads them again after Run has returned.
type recorder struct {
	t      *testing.T
	l      layout
	id     func() string
	mu     sync.Mutex
	kept   [][]any
	copies [][]any
	wg     sync.WaitGroup
}

func (r *recorder) Listen(context.Context, Listener) (PubSub, func()) {
	panic("the recorder grants every try: nothing listens")
}

func (r *recorder) LoadLibrary(context.Context, string) []error { return nil }
func (r *recorder) ErrorReply(error) (string, bool)             { return "", false }
func (r *recorder) Unsent(error) bool                           { return false }

func (r *recorder) Do(_ context.Context, c Call) (any, error) {
	s := Script(slices.Index(functionNames[:], c.Args[1].(string)))
	if argv := c.ARGV(); s != inspectScript {
		key, spec, _ := strings.Cut(argv[0].(string), "|")
		if err := r.check(s, c, key, spec); err != nil {
			r.t.Error(err)
		}
	} else if len(argv) != 0 || c.Keys != 4 {
		r.t.Errorf("inspect: %v", c.Args)
	}
	r.mu.Lock()
	r.kept = append(r.kept, c.Args)
	r.copies = append(r.copies, append([]any(nil), c.Args...))
	r.mu.Unlock()
	r.wg.Go(func() { // reads the slice after Run returned, while the Store goes on
		for range c.Args {
		}
		_ = fmt.Sprint(c.Args...)
	})
	switch s {
	case acquireScript:
		return int64(7), nil
	case extendScript:
		return []any{int64(1), int64(1), int64(7), int64(1)}, nil
	case releaseScript:
		return int64(1), nil
	default:
		return []any{int64(1), int64(0), int64(0)}, nil
	}
}

// check checks that c names key's Redis keys and channels and carries the durations and fence
// spec ("ttl/wait/fence" in ms and decimal) says.
func (r *recorder) check(s Script, c Call, key, spec string) error {
	var ttl, wait int64
	var fence uint64
	fmt.Sscanf(spec, "%d/%d/%d", &ttl, &wait, &fence)
	if c.Keys != 4 {
		return fmt.Errorf("%d keys", c.Keys)
	}
	for i, k := range r.l.keys(key) {
		if c.Key(i) != k {
			return fmt.Errorf("script %d on %q: key %d is %q, want %q", s, key, i, c.Key(i), k)
		}
	}
	argv := c.ARGV()
	want := map[Script][]any{
		acquireScript: {c.ARGV()[0], ttl, wait, "", zero, 1, 1, "v"},
		extendScript:  {c.ARGV()[0], ttl},
		releaseScript: {c.ARGV()[0], fence},
	}[s]
	if s == releaseScript && fence == 0 {
		want = want[:1]
	}
	if s == acquireScript && wait > 0 {
		want[3] = argv[3] // the try's id, which names the Store (its channel)
		if !strings.HasPrefix(argv[3].(string), r.id()+":") {
			return fmt.Errorf("acquire on %q: try %q", key, argv[3])
		}
	}
	if len(argv) != len(want) {
		return fmt.Errorf("script %d on %q: ARGV %v, want %v", s, key, argv, want)
	}
	for i := range want {
		if argv[i] != want[i] {
			return fmt.Errorf("script %d on %q: ARGV[%d] %v (%T), want %v (%T)", s, key, i, argv[i], argv[i], want[i], want[i])
		}
	}
	return nil
}

// TestConcurrentCallsNameTheirOwnKeys: many goroutines on one Store, on keys that share a slot
// of its name cache and with TTLs and waits that share slots of its durations, each send their
// own key's Redis keys and channels, their own TTL, wait and fence; and no slice handed to the
// driver is changed afterwards.
func TestConcurrentCallsNameTheirOwnKeys(t *testing.T) {
	t.Parallel()
	rec := &recorder{t: t}
	s, err := New("fake", rec, rec, WithPrefix("p:"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec.l, rec.id = s.layout, func() string { return s.id }
	same, others := collidingKeys(&s.names, 6)
	keys := append(same, others...)
	ttls := []time.Duration{8 * time.Millisecond, 16 * time.Millisecond, time.Second, 16*time.Millisecond + 1, time.Hour}
	fences := []uint64{0, 1, 1<<53 - 1, 1 << 63, math.MaxUint64}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 300 {
				key := keys[(g*5+i)%len(keys)]
				ttl, wait := ttls[(g+i)%len(ttls)], ttls[(g+2*i)%len(ttls)]
				if i%3 == 0 {
					wait = 0
				}
				fence := fences[(g+i)%len(fences)]
				holder := fmt.Sprintf("%s|%d/%d/%d", key, ms(ttl), ms(wait), fence)
				var err error
				switch i % 4 {
				case 0, 1:
					_, err = s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: holder, Permits: 1, Limit: 1, TTL: ttl, Wait: wait, Value: "v"})
				case 2:
					_, err = s.Extend(ctx, core.ExtendRequest{Key: key, Holder: holder, TTL: ttl})
				case 3:
					_, err = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: holder, Fence: fence})
				}
				if err == nil && i%50 == 0 {
					_, err = s.Inspect(ctx, key)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	rec.wg.Wait()
	for i, args := range rec.kept {
		for j := range args {
			if args[j] != rec.copies[i][j] {
				t.Fatalf("call %d: value %d changed after the driver had it: %v, was %v", i, j, args[j], rec.copies[i][j])
			}
		}
	}
}

// TestCallsShareNoSlices: two calls on one key never share a backing array, nor the name cache's
// keys: a driver that writes a call's head, or appends to it, touches no other call.
func TestCallsShareNoSlices(t *testing.T) {
	l, _ := newLayout("")
	c := &nameCache{seed: maphash.MakeSeed()}
	n := c.get(l, "k")
	a1, a2 := newArgs("h", "0"), newArgs("h", "0")
	x, y := call(n, &a1), call(n, &a2)
	x.Args[0], x.Args[Head] = "fcall", "mutated"
	x.Args = append(x.Args, "more")
	if y.Args[0] != nil || y.Args[Head] != n.keys[0] || n.keys[0] != l.keys("k")[0] {
		t.Fatalf("a write to one call reached another: %v, names %v", y.Args, n.keys)
	}
}
