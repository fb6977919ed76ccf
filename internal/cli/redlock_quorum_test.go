package cli

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/internal/testenv"
)

// run -limit L over N Redis servers says, when Redlock's quorum for the semaphore is all N, that
// losing one server stops it and how many servers would survive that; a mutex, or a semaphore
// whose quorum leaves a server spare, hears nothing of it.
func TestRunSaysWhenASemaphoreNeedsEveryRedlockServer(t *testing.T) {
	testenv.SkipShort(t, "starts five redis-servers")
	t.Parallel()
	var flags []string
	for range 5 {
		flags = append(flags, "-redis", redistest.StartServer(t).Addr)
	}
	three, five := flags[:6], flags
	for _, c := range []struct {
		name  string
		flags []string
		limit string
		note  bool
	}{
		{"mutex over 3", three, "1", false},
		{"limit 2 over 3", three, "2", true},
		{"limit 3 over 5", five, "3", false},
		{"limit 4 over 5", five, "4", true},
	} {
		code, _, errOut := runArgs(t, t.Context(), append(append([]string{"run", "-key", "sem" + c.limit, "-limit", c.limit}, c.flags...), "--", "true")...)
		if code != exitOK {
			t.Fatalf("%s: exit %d, stderr %q", c.name, code, errOut)
		}
		has := strings.Contains(errOut, "one server down stops it")
		if has != c.note {
			t.Errorf("%s: stderr %q; want the note that every server is needed: %v", c.name, errOut, c.note)
		}
		if c.note {
			n := len(c.flags) / 2
			want := "leasehold run: -limit " + c.limit + " over " + string(rune('0'+n)) + " Redis servers: Redlock needs all " + string(rune('0'+n)) + " to answer"
			if !strings.HasPrefix(errOut, want) || !strings.Contains(errOut, "5 servers for -limit 2 or 3") || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%s: stderr %q; want one line starting %q that recommends 5 servers", c.name, errOut, want)
			}
		}
	}
}
