package cli

import (
	"fmt"
	"strings"
	"testing"
)

// TestRunUnderAnotherLimitIsRefused: run and elect with a limit other than the one a key is held
// under exit 78 at once, whether they would wait or not, with one line naming both limits and
// how to fix it; they acquire nothing, take no place in the line and start no command. Once
// nobody holds the key, any limit is taken.
func TestRunUnderAnotherLimitIsRefused(t *testing.T) {
	useMemoryStore(t)
	command, open := gate(t)
	holder := start(t, append([]string{"run", "-redis", memoryRedis, "-key", "deploy", "--"}, command...)...)
	inspectUntil(t, "deploy", "1 holder(s), 1 permit(s) in use, 0 free of 1")

	const runLine = `leasehold run: "deploy" is held under limit 1, this run has -limit 3: use the key's limit (-limit 1), or wait until nobody holds it; nothing acquired, the command not started` + "\n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-redis", memoryRedis, "-key", "deploy", "-limit", "3", "-n", "--", "echo", "ran"}, runLine},
		{[]string{"run", "-redis", memoryRedis, "-key", "deploy", "-limit", "3", "--", "echo", "ran"}, runLine}, // waits for nothing
		{[]string{"run", "-redis", memoryRedis, "-key", "deploy", "-limit", "3", "-permits", "2", "-wait", "1m", "--", "echo", "ran"}, runLine},
		{[]string{"run", "-redis", memoryRedis, "-key", "deploy", "-limit", "3", "-permits", "3", "--", "echo", "ran"}, runLine},
	} {
		s := start(t, tc.args...)
		if code := s.exit(t); code != exitConfig || s.err.String() != tc.want || s.out.String() != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, nothing run and\n%q", tc.args, code, s.out.String(), s.err.String(), exitConfig, tc.want)
		}
	}
	out := inspectUntil(t, "deploy", "1 holder(s)")
	if !strings.Contains(out, "0 free of 1\n") || !strings.Contains(out, "no one waiting") {
		t.Errorf("after the refused runs, inspect shows:\n%s\nwant the one holder, 0 free of 1 and no one waiting", out)
	}
	code, out, _ := runArgs(t, t.Context(), "inspect", "-redis", memoryRedis, "-limit", "3", "deploy")
	if want := "deploy: 1 holder(s), 1 permit(s) in use, 0 free of 1 (limit 1; -limit 3 is refused)\n"; code != exitOK || !strings.HasPrefix(out, want) {
		t.Errorf("inspect -limit 3: exit %d, stdout:\n%s\nwant it to start %q", code, out, want)
	}

	open()
	if code := holder.exit(t); code != exitOK {
		t.Fatalf("holder: exit %d, stderr %q", code, holder.err.String())
	}
	inspectUntil(t, "deploy", "0 holder(s), 0 permit(s) in use; no limit: nobody holds or waits for it")

	// A semaphore of 3 is now the key's; an election (limit 1) is refused while it holds.
	command, open = gate(t)
	sem := start(t, append([]string{"run", "-redis", memoryRedis, "-key", "deploy", "-limit", "3", "--"}, command...)...)
	inspectUntil(t, "deploy", "1 holder(s), 1 permit(s) in use, 2 free of 3")
	s := start(t, "elect", "-redis", memoryRedis, "deploy", "host-a", "--", "echo", "ran")
	want := `leasehold elect: "deploy" is held under limit 3, and an election has limit 1: campaign on a key that only elect uses, or wait until nobody holds it; nothing acquired, the command not started` + "\n"
	if code := s.exit(t); code != exitConfig || s.err.String() != want || s.out.String() != "" {
		t.Errorf("elect: exit %d, stdout %q, stderr %q; want %d, nothing run and\n%q", code, s.out.String(), s.err.String(), exitConfig, want)
	}
	open()
	if code := sem.exit(t); code != exitOK {
		t.Errorf("semaphore: exit %d, stderr %q", code, sem.err.String())
	}
}

func TestHelpDocumentsTheLimitMismatchStatus(t *testing.T) {
	for _, cmd := range []string{"run", "elect", "inspect"} {
		_, out, _ := runArgs(t, t.Context(), cmd, "--help")
		if !strings.Contains(out, fmt.Sprint(exitConfig)) || !strings.Contains(out, "limit") {
			t.Errorf("%s --help does not document exit %d for a key held under another limit:\n%s", cmd, exitConfig, out)
		}
	}
}
