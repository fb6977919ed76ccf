package rediscore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/core"
)

// TestAcquireArgsEndAtTheLastValueSent: an acquire's ARGV is holder and TTL, then wait, try id,
// listens, permits, limit, value, held floor, grant floor and lock delay up to the last that is
// not its default, each at its place, the defaults before it included: a lock delay, last, is
// sent only when there is one.
func TestAcquireArgsEndAtTheLastValueSent(t *testing.T) {
	var d durations
	lock := core.AcquireRequest{Holder: "h", Permits: 1, Limit: 1, TTL: time.Second}
	with := func(f func(r *core.AcquireRequest)) core.AcquireRequest {
		r := lock
		f(&r)
		return r
	}
	for _, tc := range []struct {
		c    acquireCall
		want string
	}{
		{acquireCall{req: lock}, "[h 1000]"},
		{acquireCall{req: with(func(r *core.AcquireRequest) { r.Wait = time.Minute })}, "[h 1000 60000]"},
		{acquireCall{req: lock, try: "s:1"}, "[h 1000 0 s:1]"},
		{acquireCall{req: lock, try: "s:1", listens: true}, "[h 1000 0 s:1 1]"},
		{acquireCall{req: with(func(r *core.AcquireRequest) { r.Permits = 2; r.Limit = 2 })}, "[h 1000 0  0 2 2]"},
		{acquireCall{req: with(func(r *core.AcquireRequest) { r.Limit = 3 })}, "[h 1000 0  0 1 3]"},
		{acquireCall{req: with(func(r *core.AcquireRequest) { r.Value = "0" })}, "[h 1000 0  0 1 1 0]"},
		{acquireCall{req: lock, fences: fences{held: 9}}, "[h 1000 0  0 1 1  9]"},
		{acquireCall{req: lock, fences: fences{grant: 8}}, "[h 1000 0  0 1 1  0 8]"},
		{acquireCall{req: with(func(r *core.AcquireRequest) { r.Wait, r.Value, r.Permits, r.Limit = time.Minute, "v", 2, 5 }),
			try: "s:2", listens: true, fences: fences{grant: 8, held: 9}}, "[h 1000 60000 s:2 1 2 5 v 9 8]"},
		{acquireCall{req: with(func(r *core.AcquireRequest) { r.LockDelay = 5 * time.Second })}, "[h 1000 0  0 1 1  0 0 5000]"},
		{acquireCall{req: with(func(r *core.AcquireRequest) { r.LockDelay = time.Microsecond; r.Wait = time.Minute }),
			try: "s:3"}, "[h 1000 60000 s:3 0 1 1  0 0 1]"},
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

// TestScriptsTakeEveryArgumentByName: no Lua of ours reads an argument by its position (ARGV[i]);
// each operation's tiers take the script's arguments as parameters named as args.go lists them,
// in that order.
func TestScriptsTakeEveryArgumentByName(t *testing.T) {
	for name, src := range map[string]string{"common.lua": commonPrelude, "line.lua": commonLine, "guard.lua": guard} {
		if strings.Contains(src, "ARGV") {
			t.Errorf("%s reads ARGV", name)
		}
	}
	for _, op := range ops {
		if strings.Contains(op.src, "ARGV") {
			t.Errorf("%s.lua reads ARGV: it takes its arguments as parameters", op.name)
		}
		lua := op.source()
		sig := "(all"
		for _, p := range op.params {
			sig += ", " + p
		}
		sig += ")"
		tiers := []string{op.name}
		if op.fast {
			tiers = append(tiers, op.name+"_fast")
		}
		for _, f := range tiers {
			if !strings.Contains(lua, "local function "+f+sig+"\n") {
				t.Errorf("%s.lua: no %s%s", op.name, f, sig)
			}
		}
	}
}
