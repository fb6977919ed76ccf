package rediscore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/internal/redisharness"
	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
)

// calls returns how many times the server at addr ran each of names since its stats were
// reset (INFO commandstats).
func calls(t *testing.T, addr string, names ...string) map[string]int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]int)
	for _, line := range strings.Split(info, "\n") {
		for _, name := range names {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				got[name] = n
			}
		}
	}
	return got
}

// pairOn acquires and releases key through s.
func pairOn(t *testing.T, s core.Store, key string) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Acquire(ctx, core.AcquireRequest{Key: key, Holder: "h", Permits: 1, Limit: 1, TTL: time.Minute, Wait: time.Minute})
	if err != nil || !res.Granted {
		t.Fatalf("acquire %q: %+v, %v", key, res, err)
	}
	if ok, err := s.Release(ctx, core.ReleaseRequest{Key: key, Holder: "h", Fence: res.Fence}); err != nil || !ok {
		t.Fatalf("release %q: %v, %v", key, ok, err)
	}
}

func do(t *testing.T, addr string, args ...string) {
	t.Helper()
	if reply, err := redistest.Do(addr, args...); err != nil || strings.HasPrefix(reply, "-") {
		t.Fatalf("%v: %q, %v", args, reply, err)
	}
}

// TestScriptsRunAsFunctions: where the server has Redis Functions, both drivers load the
// library once and FCALL it, with no EVALSHA; a server that lost the library (FUNCTION FLUSH,
// as after a restart without persistence) is given it again by the next call.
func TestScriptsRunAsFunctions(t *testing.T) {
	srv := redistest.StartServer(t)
	for name, mk := range redisharness.Drivers {
		t.Run(name, func(t *testing.T) {
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			do(t, srv.Addr, "CONFIG", "RESETSTAT")
			s := mk(t, srv.Addr)
			for i := range 3 {
				pairOn(t, s, "fn:"+name+strconv.Itoa(i))
			}
			got := calls(t, srv.Addr, "fcall", "evalsha", "eval", "function|load")
			if got["fcall"] != 6 || got["evalsha"] != 0 || got["eval"] != 0 || got["function|load"] != 1 {
				t.Fatalf("three pairs ran %v; want 6 FCALLs, 1 FUNCTION LOAD and no EVALSHA or EVAL", got)
			}
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			pairOn(t, s, "fn:"+name+"after-flush")
			got = calls(t, srv.Addr, "fcall", "evalsha", "function|load")
			if got["function|load"] != 2 || got["evalsha"] != 0 {
				t.Fatalf("after FUNCTION FLUSH: %v; want the library loaded again and no EVALSHA", got)
			}
		})
	}
}

// TestScriptsFallBackWhereFunctionsAreRefused: a user whose ACL allows EVALSHA but not FUNCTION
// LOAD (the ACL documented before functions) runs the scripts by EVALSHA on both drivers, and
// sends FUNCTION LOAD once only; one allowed FCALL and FUNCTION LOAD too uses functions.
func TestScriptsFallBackWhereFunctionsAreRefused(t *testing.T) {
	srv := redistest.StartServer(t)
	do(t, srv.Addr, append([]string{"ACL", "SETUSER", "old"}, strings.Fields(ACLRules)...)...)
	do(t, srv.Addr, append(append([]string{"ACL", "SETUSER", "new"}, strings.Fields(ACLRules)...), "+fcall", "+function|load")...)
	stores := userStores(srv.Addr)
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			do(t, srv.Addr, "FUNCTION", "FLUSH")
			do(t, srv.Addr, "CONFIG", "RESETSTAT")
			s := mk(t, "old")
			for i := range 3 {
				pairOn(t, s, "leasehold:fb:"+name+strconv.Itoa(i))
			}
			got := calls(t, srv.Addr, "fcall", "evalsha")
			if got["fcall"] != 0 || got["evalsha"] != 6 {
				t.Fatalf("three pairs without the right to load functions ran %v; want 6 EVALSHAs and no FCALL", got)
			}
			info, _ := redistest.Do(srv.Addr, "INFO", "commandstats")
			_, load, _ := strings.Cut(info, "cmdstat_function|load:")
			if load, _, _ = strings.Cut(load, "\n"); !strings.HasPrefix(load, "calls=0,") || !strings.Contains(load, ",rejected_calls=1,") {
				t.Fatalf("FUNCTION LOAD %q; want it refused once, then not sent again", load)
			}
			do(t, srv.Addr, "CONFIG", "RESETSTAT")
			pairOn(t, mk(t, "new"), "leasehold:fb:"+name+"new")
			if got := calls(t, srv.Addr, "fcall", "evalsha"); got["fcall"] != 2 || got["evalsha"] != 0 {
				t.Fatalf("a user allowed functions ran %v; want 2 FCALLs", got)
			}
		})
	}
}
