package cli

import (
	"strings"
	"testing"
)

// A bad timing flag is named alone, with the value given and its bound: a negative -wait does
// not blame -grace, which was not given, nor the other way round.
func TestTimingFlagErrorsNameOnlyTheFlagsAtFault(t *testing.T) {
	checkUsageErrors(t, []struct {
		args []string
		want string
	}{
		{[]string{"run", "-redis", "127.0.0.1:6379", "-key", "k", "-wait", "-1s", "--", "true"}, "leasehold run: -wait -1s: must not be negative;"},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-key", "k", "-grace", "-2s", "--", "true"}, "leasehold run: -grace -2s: must not be negative;"},
		{[]string{"run", "-redis", "127.0.0.1:6379", "-key", "k", "-wait", "-1s", "-grace", "-2s", "--", "true"}, "leasehold run: -wait -1s and -grace -2s: must not be negative;"},
		{[]string{"elect", "-redis", "127.0.0.1:6379", "-wait", "-1s", "k", "v", "--", "true"}, "leasehold elect: -wait -1s: must not be negative;"},
	})
}

// An error of the lock a run makes names that lock: a mutex for a run without -limit (or
// -limit 1), a semaphore for -limit above 1.
func TestRunErrorsNameThePrimitiveTheRunMade(t *testing.T) {
	useMemoryStore(t)
	long := strings.Repeat("k", 1100) // beyond core.MaxKeyLen, which only the primitive checks
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{nil, `leasehold run: leasehold: new mutex "`},
		{[]string{"-limit", "1"}, `leasehold run: leasehold: new mutex "`},
		{[]string{"-limit", "2"}, `leasehold run: leasehold: new semaphore "`},
	} {
		args := append(append([]string{"run", "-redis", memoryRedis, "-key", long}, tc.extra...), "--", "echo", "ran")
		code, out, errOut := runArgs(t, t.Context(), args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, tc.want) || !strings.Contains(errOut, "must be at most 1024") {
			t.Errorf("run -key <1100 bytes> %v: exit %d, stdout %q, stderr %q; want %d and a line starting %q", tc.extra, code, out, errOut, exitUsage, tc.want)
		}
	}
}
