package rediscore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/rediscore"
	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/core"
)

// Adversarial review of issue 16 as a whole (review16m): every number at its documented edge at
// once, through the fast and the general paths, the line and its grant taken from the message.

// TestNumbersAtTheirEdges_review16m: a lease at the highest fence floor the Store honours
// (2^53 − 2^32) and the longest TTL (core.MaxDuration), a waiter in line for the longest Wait,
// whose grant from the line (taken from its message, with no command) is fenced above it, then
// extended for the longest TTL, released, and the key's next grant (the fast path, on a hash
// that lasts long enough) fenced above again: every call succeeds, fences strictly increase, the
// TTLs are what was asked, and every Redis key left lives on (no expiry computed out of range).
func TestNumbersAtTheirEdges_review16m(t *testing.T) {
	const top = 1<<53 - 1<<32
	eachDriver(t, func(t *testing.T, mk func() redisharness.Store, addr string) {
		ctx := context.Background()
		a, b := mk(), mk()
		c := raw(t, addr)
		req := func(holder string) core.AcquireRequest {
			return core.AcquireRequest{Key: "edge", Holder: holder, Permits: 2, Limit: 2, TTL: core.MaxDuration, Unshared: true}
		}
		ra, err := a.(core.FenceRaiser).RaiseFence(ctx, req("a"), top)
		if err != nil || !ra.Granted || ra.Fence != top {
			t.Fatalf("RaiseFence to 2^53-2^32 = %+v, %v", ra, err)
		}
		wb := req("b")
		wb.Wait = core.MaxDuration
		rb, err := b.Acquire(ctx, wb)
		if err != nil || rb.Granted {
			t.Fatalf("b's try while a holds = %+v, %v; want a refusal", rb, err)
		}
		w, err := b.Register(ctx, wb)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		pollUntil(t, w.Reliable)
		if ok, err := a.Release(ctx, core.ReleaseRequest{Key: "edge", Holder: "a", Fence: ra.Fence}); !ok || err != nil {
			t.Fatalf("a's Release = %v, %v", ok, err)
		}
		<-w.C()
		gb, err := b.Acquire(ctx, wb)
		if err != nil || !gb.Granted || gb.Fence != top+1 {
			t.Fatalf("b's Acquire after the line granted it = %+v, %v; want fence %d", gb, err, uint64(top+1))
		}
		eb, err := b.Extend(ctx, core.ExtendRequest{Key: "edge", Holder: "b", TTL: core.MaxDuration})
		if err != nil || eb.Fence != gb.Fence {
			t.Fatalf("b's Extend = %+v, %v", eb, err)
		}
		snap, err := b.Inspect(ctx, "edge")
		if err != nil || len(snap.Leases) != 1 || snap.Leases[0].TTL < core.MaxDuration-time.Minute || snap.Leases[0].TTL > core.MaxDuration {
			t.Fatalf("Inspect = %+v, %v; want b's lease with a TTL of about core.MaxDuration", snap, err)
		}
		if ok, err := b.Release(ctx, core.ReleaseRequest{Key: "edge", Holder: "b", Fence: gb.Fence}); !ok || err != nil {
			t.Fatalf("b's Release = %v, %v", ok, err)
		}
		rc, err := a.Acquire(ctx, req("c"))
		if err != nil || !rc.Granted || rc.Fence != top+2 {
			t.Fatalf("c's Acquire = %+v, %v; want fence %d", rc, err, uint64(top+2))
		}
		for _, k := range rediscore.Keys("edge") {
			if ttl := c.PTTL(ctx, k).Val(); ttl == -1 || (ttl >= 0 && ttl < time.Hour) {
				t.Errorf("%s: PTTL %v; want none (no key) or a long one", k, ttl)
			}
		}
	})
}
