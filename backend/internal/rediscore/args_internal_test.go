package rediscore

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestAcquireArgsEndAtTheLastValueSent: an acquire's ARGV is holder, permits, limit and TTL, then
// wait, try id, listens, value, held floor and grant floor up to the last that is not its
// default, each at its place, the defaults before it included.
func TestAcquireArgsEndAtTheLastValueSent(t *testing.T) {
	var d durations
	base := core.AcquireRequest{Holder: "h", Permits: 1, Limit: 2, TTL: time.Second}
	for _, tc := range []struct {
		c    acquireCall
		want string
	}{
		{acquireCall{req: base}, "[h 1 2 1000]"},
		{acquireCall{req: core.AcquireRequest{Holder: "h", Permits: 1, Limit: 2, TTL: time.Second, Wait: time.Minute}}, "[h 1 2 1000 60000]"},
		{acquireCall{req: base, try: "s:1"}, "[h 1 2 1000 0 s:1]"},
		{acquireCall{req: base, try: "s:1", listens: true}, "[h 1 2 1000 0 s:1 1]"},
		{acquireCall{req: core.AcquireRequest{Holder: "h", Permits: 1, Limit: 2, TTL: time.Second, Value: "0"}}, "[h 1 2 1000 0  0 0]"},
		{acquireCall{req: base, fences: fences{held: 9}}, "[h 1 2 1000 0  0  9]"},
		{acquireCall{req: base, fences: fences{grant: 8}}, "[h 1 2 1000 0  0  0 8]"},
		{acquireCall{req: core.AcquireRequest{Holder: "h", Permits: 1, Limit: 2, TTL: time.Second, Wait: time.Minute, Value: "v"},
			try: "s:2", listens: true, fences: fences{grant: 8, held: 9}}, "[h 1 2 1000 60000 s:2 1 v 9 8]"},
	} {
		a := acquireArgs(tc.c, &d)
		if got := fmt.Sprint(a.values()); got != tc.want {
			t.Errorf("acquireArgs(%+v) = %s, want %s", tc.c, got, tc.want)
		}
	}
	r0, r7 := releaseArgs(core.ReleaseRequest{Holder: "h"}), releaseArgs(core.ReleaseRequest{Holder: "h", Fence: 7})
	if got := fmt.Sprint(r0.values(), r7.values()); got != "[h] [h 7]" {
		t.Errorf("releaseArgs: %s, want [h] [h 7]", got)
	}
}
