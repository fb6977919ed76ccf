package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// The largest numbers the contract allows reach etcd whole: a TTL and a lock delay of
// core.MaxDuration each (an etcd lease of both, under etcd's 9e9 s), and core.MaxLimit permits.
func TestLargestTTLDelayAndLimitAreGranted(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	s := newStore(t)
	r := core.AcquireRequest{Key: key, Holder: "h", Permits: core.MaxLimit, Limit: core.MaxLimit, TTL: core.MaxDuration, LockDelay: core.MaxDuration}
	res := mustAcquire(t, s, r)
	snap, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Limit != core.MaxLimit || len(snap.Leases) != 1 || snap.Leases[0].Permits != core.MaxLimit ||
		snap.Leases[0].TTL <= core.MaxDuration-time.Minute || snap.Leases[0].TTL > core.MaxDuration {
		t.Fatalf("Inspect = %+v; want one lease of %d permits with about %v left", snap, core.MaxLimit, core.MaxDuration)
	}
	if _, err := s.Extend(context.Background(), core.ExtendRequest{Key: key, Holder: "h", TTL: core.MaxDuration}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Release(context.Background(), core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
}

// Keys and holders are opaque: '/', '%' and their escapes, and a key whose escaped form begins
// another's, name records of their own; values of any bytes up to core.MaxValueLen come back
// as they were.
func TestOddKeysHoldersAndValuesStayApart(t *testing.T) {
	t.Parallel()
	base := uniqueKey(t)
	s := newStore(t)
	value := string(bytes.Repeat([]byte{0xff, 0xfe, '/', 0}, core.MaxValueLen/4))
	keys := []string{base, base + "/", base + "/l/x", base + "%2F", base + "%", base + "%25", base + "%2Fl%2Fx", base + "\x00h"}
	holders := []string{"/", "%", "%2F", "a/b", "%252F", "h\x00", strings.Repeat("/", 64)}
	fences := map[string]uint64{}
	for _, k := range keys {
		for i, h := range holders {
			v := value
			if i%2 == 0 {
				v = ""
			}
			r := req(k, h, 1, len(holders))
			r.Value = v
			fences[k+"|"+h] = mustAcquire(t, s, r).Fence
		}
	}
	for _, k := range keys {
		snap, err := s.Inspect(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Leases) != len(holders) {
			t.Fatalf("Inspect(%q) lists %d leases, want %d: %+v", k, len(snap.Leases), len(holders), snap.Leases)
		}
		for _, l := range snap.Leases {
			if fences[k+"|"+l.Holder] != l.Fence {
				t.Errorf("Inspect(%q) lists %q with fence %d, granted %d", k, l.Holder, l.Fence, fences[k+"|"+l.Holder])
			}
			i := 0
			for i < len(holders) && holders[i] != l.Holder {
				i++
			}
			if want := map[bool]string{true: "", false: value}[i%2 == 0]; l.Value != want {
				t.Errorf("Inspect(%q) gives %q value of %d bytes, want %d", k, l.Holder, len(l.Value), len(want))
			}
		}
	}
	for _, k := range keys {
		for _, h := range holders {
			if ok, err := s.Release(context.Background(), core.ReleaseRequest{Key: k, Holder: h, Fence: fences[k+"|"+h]}); err != nil || !ok {
				t.Fatalf("Release(%q, %q) = %v, %v", k, h, ok, err)
			}
		}
	}
}

// After Close every operation returns an error wrapping core.ErrClosed; with ctx ended, one
// satisfying errors.Is(err, ctx.Err()).
func TestClosedStoreAndEndedContextsSayWhy(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(what string, ctx context.Context, want error) {
		t.Helper()
		var errs = map[string]error{}
		_, errs["Acquire"] = s.Acquire(ctx, req(key, "h", 1, 1))
		w := req(key, "h", 1, 1)
		w.Wait = time.Minute
		_, errs["Acquire with Wait"] = s.Acquire(ctx, w)
		_, errs["Extend"] = s.Extend(ctx, core.ExtendRequest{Key: key, Holder: "h", TTL: time.Minute})
		_, errs["Release"] = s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: 1})
		_, errs["Inspect"] = s.Inspect(ctx, key)
		_, errs["Register"] = s.Register(ctx, w)
		_, errs["Watch"] = s.Watch(ctx, key)
		for op, err := range errs {
			if !errors.Is(err, want) {
				t.Errorf("%s %s = %v; want an error wrapping %v", what, op, err, want)
			}
		}
	}
	check("with ctx canceled", ctx, context.Canceled)
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	check("with ctx past its deadline", dctx, context.DeadlineExceeded)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("after Close", context.Background(), core.ErrClosed)
}
