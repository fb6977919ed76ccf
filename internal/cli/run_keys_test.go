package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/redistest"
	"github.com/leasehold/leasehold/core"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/testenv"
)

// Runs naming the same keys in other orders take turns: each holds both keys while its command
// runs, no two commands overlap, and none waits forever on a key another holds while it waits
// for the other's (each run would then exit busy after -wait).
func TestRunsOnSeveralKeysInAnyOrderNeverOverlapNorDeadlock(t *testing.T) {
	useMemoryStore(t)
	log := filepath.Join(t.TempDir(), "intervals")
	script := fmt.Sprintf(`echo start $(date +%%s%%N) >> %s; sleep 0.02; echo end $(date +%%s%%N) >> %s`, log, log)
	orders := [][]string{{"-key", "a", "-key", "b"}, {"-key", "b", "-key", "a"}, {"-key", "b", "-key", "c", "-key", "a"}}
	const rounds = 4
	var wg sync.WaitGroup
	for _, keys := range orders {
		wg.Go(func() {
			for i := range rounds {
				args := append(append([]string{"run", "-redis", memoryRedis}, keys...), "-wait", "20s", "--", "sh", "-c", script)
				if code, _, errOut := runArgs(t, t.Context(), args...); code != exitOK {
					t.Errorf("%v round %d: exit %d, stderr %q", keys, i, code, errOut)
				}
			}
		})
	}
	wg.Wait()
	checkNoOverlap(t, log, rounds*len(orders))
	for _, key := range []string{"a", "b", "c"} {
		inspectUntil(t, key, "0 holder(s)")
	}
}

// A run holding several keys holds each as a mutex: a run on one of them is busy, and so is a
// run on several of which one is held, which takes none of them (the free key it took first, in
// sorted order, is released) and says which key was busy. Once the holder's command exits, every
// key is free.
func TestRunHoldingSeveralKeysKeepsEachBusy(t *testing.T) {
	useMemoryStore(t)
	command, open := gate(t)
	holder := start(t, append([]string{"run", "-redis", memoryRedis, "-key", "c", "-key", "b", "-value", "the holder", "--"}, command...)...)
	inspectUntil(t, "b", "1 holder(s)")
	inspectUntil(t, "c", "1 holder(s)")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-key", "b", "-n"}, `leasehold run: "b" is busy (held by "the holder")` + "\n"},
		{[]string{"-key", "c", "-key", "a", "-n"}, `leasehold run: "c" is busy (held by "the holder"); none of "c" and "a" acquired` + "\n"},
		{[]string{"-key", "a", "-key", "c", "-key", "d", "-wait", "100ms"}, `leasehold run: "c" is busy (held by "the holder"): not acquired within 100ms; none of "a", "c" and "d" acquired` + "\n"},
	} {
		s := start(t, append(append([]string{"run", "-redis", memoryRedis}, tc.args...), "--", "echo", "ran")...)
		if code := s.exit(t); code != exitBusy || s.err.String() != tc.want || s.out.String() != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, nothing run and\n%q", tc.args, code, s.out.String(), s.err.String(), exitBusy, tc.want)
		}
		// "a", taken before "c" was found busy, has been released: nothing is held but the holder's.
		for _, key := range []string{"a", "d"} {
			if _, out, _ := runArgs(t, t.Context(), "inspect", "-redis", memoryRedis, key); !strings.Contains(out, "0 holder(s)") {
				t.Errorf("%v left %q held:\n%s", tc.args, key, out)
			}
		}
	}
	open()
	if code := holder.exit(t); code != exitOK {
		t.Fatalf("holder: exit %d, stderr %q", code, holder.err.String())
	}
	for _, key := range []string{"b", "c"} {
		inspectUntil(t, key, "0 holder(s)")
	}
	if code, _, errOut := runArgs(t, t.Context(), "run", "-redis", memoryRedis, "-key", "c", "-key", "a", "-n", "--", "true"); code != exitOK {
		t.Errorf("once the holder exited, -key c -key a -n: exit %d, stderr %q", code, errOut)
	}
}

// The command holding several keys sees LEASEHOLD_FENCE and LEASEHOLD_HOLDER of the first key
// given, and LEASEHOLD_FENCES: every key's fence, KEY=FENCE in the order given, a key quoted
// when it holds a space, a quote or an '='. A run on one key has no LEASEHOLD_FENCES.
func TestRunOnSeveralKeysTellsTheCommandEveryFence(t *testing.T) {
	useMemoryStore(t)
	const show = `echo "$LEASEHOLD_FENCE|$LEASEHOLD_HOLDER|${LEASEHOLD_FENCES-unset}"`
	code, out, errOut := runArgs(t, t.Context(), "run", "-redis", memoryRedis, "-key", "x=y", "-key", "db", "-key", `cache "2"`, "--", "sh", "-c", show)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	m := regexp.MustCompile(`^(\d+)\|(\S+)\|"x=y"=(\d+) db=(\d+) "cache \\"2\\""=(\d+)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the command printed %q; want FENCE|HOLDER|\"x=y\"=N db=N \"cache \\\"2\\\"\"=N", out)
	}
	if m[1] != m[3] {
		t.Errorf("LEASEHOLD_FENCE %s, LEASEHOLD_FENCES %q; want the first key's fence", m[1], out)
	}
	for _, f := range m[3:] {
		if n, _ := strconv.ParseUint(f, 10, 64); n == 0 {
			t.Errorf("LEASEHOLD_FENCES %q: fence %s, want a grant's", out, f)
		}
	}
	code, out, errOut = runArgs(t, t.Context(), "run", "-redis", memoryRedis, "-key", "db", "--", "sh", "-c", show)
	if code != exitOK || !regexp.MustCompile(`^\d+\|\S+\|unset\n$`).MatchString(out) {
		t.Errorf("one key: exit %d, stdout %q, stderr %q; want FENCE|HOLDER|unset", code, out, errOut)
	}
}

// Several keys take a mutex on each: -limit or -permits other than 1 is a usage error naming
// them, and so is a key given twice or an empty one. Nothing is acquired or run.
func TestRunOnSeveralKeysRefusesBadUsage(t *testing.T) {
	useMemoryStore(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-key", "a", "-key", "b", "-limit", "3"}, "-limit 3 with several -key: a run on several keys holds a mutex on each (-limit 1, -permits 1)"},
		{[]string{"-key", "a", "-key", "b", "-limit", "3", "-permits", "2"}, "-limit 3 and -permits 2 with several -key"},
		{[]string{"-key", "a", "-key", "b", "-permits", "2"}, "-permits 2 with several -key"},
		{[]string{"-key", "a", "-key", "b", "-key", "a"}, `-key "a" given twice`},
		{[]string{"-key", "a", "-key", ""}, `-key "": a key must not be empty`},
	} {
		code, out, errOut := runArgs(t, t.Context(), append(append([]string{"run", "-redis", memoryRedis}, tc.args...), "--", "echo", "ran")...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "leasehold run: "+tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and one line starting %q", tc.args, code, out, errOut, exitUsage, tc.want)
		}
	}
	if _, out, _ := runArgs(t, t.Context(), "inspect", "-redis", memoryRedis, "a"); !strings.Contains(out, "0 holder(s)") {
		t.Errorf("a usage error acquired %q:\n%s", "a", out)
	}
}

// failingExtends is a store whose Extends of one key fail.
type failingExtends struct {
	core.Store
	key string
}

func (s *failingExtends) Extend(ctx context.Context, req core.ExtendRequest) (core.ExtendResult, error) {
	if req.Key == s.key {
		return core.ExtendResult{}, errors.New("the network is down")
	}
	return s.Store.Extend(ctx, req)
}

// Each key's lease is refreshed on its own, and the stop's schedule follows the earliest
// deadline: when one key's refreshes fail while the other's succeed, the command is stopped as
// that key's lease runs out, the message naming it, run exits 75, and both keys are released.
func TestRunOnSeveralKeysStopsAsTheFirstLeaseRunsOut(t *testing.T) {
	inProcessStore = &failingExtends{Store: useMemoryStore(t), key: "b"}
	s := start(t, "run", "-redis", memoryRedis, "-key", "a", "-key", "b", "-ttl", "2s", "-grace", "400ms", "--", "sleep", "30")
	if code := s.exit(t); code != exitLost || !strings.Contains(s.err.String(), `the lease on "b" was not renewed in time`) {
		t.Errorf("exit %d, stderr %q; want %d and a line saying the lease on \"b\" was not renewed in time", code, s.err.String(), exitLost)
	}
	inspectUntil(t, "a", "0 holder(s)")
}

// Losing any key's lease (taken from the store) loses the whole: the command is stopped at once,
// run exits 75 naming the key, and the other key is released.
func TestRunOnSeveralKeysStopsWhenAnyLeaseIsLost(t *testing.T) {
	store := useMemoryStore(t)
	s := start(t, "run", "-redis", memoryRedis, "-key", "a", "-key", "b", "-ttl", "3s", "--", "sleep", "30")
	inspectUntil(t, "b", "1 holder(s)")
	snap, err := store.Inspect(t.Context(), "b")
	if err != nil || len(snap.Leases) != 1 {
		t.Fatalf("inspect b: %v, %+v", err, snap)
	}
	if _, err := store.Release(t.Context(), core.ReleaseRequest{Key: "b", Holder: snap.Leases[0].Holder}); err != nil {
		t.Fatal(err)
	}
	if code := s.exit(t); code != exitLost || !containsAll(s.err.String(), []string{`key "b"`, "lost", "stopping the command"}) {
		t.Errorf("exit %d, stderr %q; want %d and a line saying the lease on \"b\" was lost", code, s.err.String(), exitLost)
	}
	inspectUntil(t, "a", "0 holder(s)")
}

// On real servers — Redis, Redlock over three, PostgreSQL — runs naming {a,b} and {b,a} take
// turns without overlap or deadlock, and a run holding both keeps a run on one busy.
func TestRunsOnSeveralKeysTakeTurnsOnRealServers(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url := "redis://" + redistest.StartServer(t).Addr
		runsNeverOverlap(t, []string{"-redis", url}, 3, []string{"-key", "a", "-key", "b"}, []string{"-key", "b", "-key", "a"})
		severalKeysKeepOneBusy(t, []string{"-redis", url})
	})
	t.Run("redlock", func(t *testing.T) {
		testenv.SkipShort(t, "starts three Redis servers")
		t.Parallel()
		var urls []string
		for range 3 {
			urls = append(urls, "-redis", "redis://"+redistest.StartServer(t).Addr)
		}
		runsNeverOverlap(t, urls, 3, []string{"-key", "a", "-key", "b"}, []string{"-key", "b", "-key", "a"})
		severalKeysKeepOneBusy(t, urls)
	})
	t.Run("postgres", func(t *testing.T) {
		testenv.SkipShort(t, "starts PostgreSQL")
		t.Parallel()
		url := pgServer(t).URL
		a, b := unique("a"), unique("b")
		runsNeverOverlap(t, storeFlag(url), 3, []string{"-key", a, "-key", b}, []string{"-key", b, "-key", a})
	})
}

// severalKeysKeepOneBusy starts a run holding keys x and y on the store storeArgs name, and
// checks that run -key y -n exits busy while it runs.
func severalKeysKeepOneBusy(t *testing.T, storeArgs []string) {
	t.Helper()
	hctx, stop := context.WithCancel(t.Context())
	holder := cli(hctx, append(append([]string{"run"}, storeArgs...), "-key", "x", "-key", "y", "--", "sleep", "30")...)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer stop()
	poll.For(t, "run -key y -n to find y busy", func() (string, bool) {
		cmd := cli(t.Context(), append(append([]string{"run"}, storeArgs...), "-key", "y", "-n", "--", "true")...)
		out, _ := cmd.CombinedOutput()
		return fmt.Sprintf("exit %d: %s", cmd.ProcessState.ExitCode(), out), cmd.ProcessState.ExitCode() == exitBusy && strings.Contains(string(out), `"y" is busy`)
	})
}

// A run on several keys interrupted while it waits, having taken some of them, releases those
// and exits 130: all or nothing.
func TestRunOnSeveralKeysInterruptedWhileWaitingHoldsNothing(t *testing.T) {
	useMemoryStore(t)
	command, open := gate(t)
	holder := start(t, append([]string{"run", "-redis", memoryRedis, "-key", "b", "--"}, command...)...)
	inspectUntil(t, "b", "1 holder(s)")
	waiter := start(t, "run", "-redis", memoryRedis, "-key", "b", "-key", "a", "--", "echo", "ran")
	inspectUntil(t, "a", "1 holder(s)") // taken first, in sorted order; the waiter now waits for b
	waiter.cancel()
	want := `leasehold run: interrupted while waiting for "b" and "a"; nothing acquired` + "\n"
	if code := waiter.exit(t); code != exitInterrupted || waiter.err.String() != want || waiter.out.String() != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d, nothing run and\n%q", code, waiter.out.String(), waiter.err.String(), exitInterrupted, want)
	}
	inspectUntil(t, "a", "0 holder(s)")
	open()
	if code := holder.exit(t); code != exitOK {
		t.Errorf("holder: exit %d, stderr %q", code, holder.err.String())
	}
}

func TestRunHelpDocumentsSeveralKeys(t *testing.T) {
	code, out, _ := runArgs(t, t.Context(), "run", "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"-key KEY [-key KEY...]", "all or nothing", "sorted key order", "never deadlock", "earliest deadline",
		"LEASEHOLD_FENCES", "first key's", "a character that does not print", "-limit and -permits other\nthan 1 are a usage error"} {
		if !strings.Contains(out, want) {
			t.Errorf("run --help does not say %q:\n%s", want, out)
		}
	}
}

// parseFences reads LEASEHOLD_FENCES as run's help describes it: KEY=FENCE, space-separated, a
// key Go-quoted when it needs it, the fence after the last '='.
func parseFences(s string) (keys []string, fences []uint64, err error) {
	for s != "" {
		var key, rest string
		if s[0] == '"' {
			q, qerr := strconv.QuotedPrefix(s)
			if qerr != nil {
				return nil, nil, qerr
			}
			key, _ = strconv.Unquote(q)
			rest = s[len(q):]
			if !strings.HasPrefix(rest, "=") {
				return nil, nil, fmt.Errorf("no '=' after %s", q)
			}
			rest = rest[1:]
		} else {
			item, _, _ := strings.Cut(s, " ")
			i := strings.LastIndexByte(item, '=')
			if i < 0 {
				return nil, nil, fmt.Errorf("no '=' in %q", item)
			}
			key, rest = item[:i], s[i+1:]
		}
		num, after, _ := strings.Cut(rest, " ")
		f, perr := strconv.ParseUint(num, 10, 64)
		if perr != nil {
			return nil, nil, perr
		}
		keys, fences, s = append(keys, key), append(fences, f), after
	}
	return keys, fences, nil
}

// Every key comes back out of LEASEHOLD_FENCES as it was, whatever it holds: spaces of any kind,
// quotes, '=', backslashes, newlines, NUL, format characters and bytes that are not UTF-8.
func TestRunOnSeveralKeysWritesFencesEveryKeyReadsBackFrom(t *testing.T) {
	keys := []string{"db", "x=y", "=", "a=", `"q"`, `q"`, `back\slash`, "sp ace", "new\nline", "tab\t", "nul\x00",
		"\xff\xfe", "ideo\u3000space", "nb\u00a0sp", "zw\u200dj", "emoji\U0001F512", "\ufffd", `\"`, "k=1 l=2"}
	lease := multiHeld{leases: make([]core.Lease, len(keys))}
	for i, k := range keys {
		lease.leases[i] = fencedLease{key: k, fence: uint64(100 + i)}
	}
	var fences string
	for _, kv := range leaseEnv(lease) {
		if v, ok := strings.CutPrefix(kv, "LEASEHOLD_FENCES="); ok {
			fences = v
		}
	}
	got, gotFences, err := parseFences(fences)
	if err != nil || len(got) != len(keys) {
		t.Fatalf("LEASEHOLD_FENCES=%s: read %q, %v; want %d keys", fences, got, err, len(keys))
	}
	for i, k := range keys {
		if got[i] != k || gotFences[i] != uint64(100+i) {
			t.Errorf("key %d: read %q=%d, want %q=%d (LEASEHOLD_FENCES=%s)", i, got[i], gotFences[i], k, 100+i, fences)
		}
	}
}

// fencedLease is a core.Lease with a key and a fence, for leaseEnv.
type fencedLease struct {
	core.Lease
	key   string
	fence uint64
}

func (l fencedLease) Key() string    { return l.key }
func (l fencedLease) Fence() uint64  { return l.fence }
func (l fencedLease) Holder() string { return "h" }

// A run on several keys, one of which is held as a semaphore (a limit other than 1), is refused
// with the configuration status, naming that key and its limit, whether it waits or tries once;
// the key it took before is released and the command not run.
func TestRunOnSeveralKeysRefusesAKeyHeldUnderAnotherLimit(t *testing.T) {
	useMemoryStore(t)
	command, open := gate(t)
	holder := start(t, append([]string{"run", "-redis", memoryRedis, "-key", "b", "-limit", "3", "--"}, command...)...)
	inspectUntil(t, "b", "1 holder(s)")
	for _, wait := range [][]string{{"-n"}, {"-wait", "1m"}} {
		args := append(append([]string{"run", "-redis", memoryRedis, "-key", "b", "-key", "a"}, wait...), "--", "echo", "ran")
		s := start(t, args...)
		if code := s.exit(t); code != exitConfig || s.out.String() != "" ||
			!containsAll(s.err.String(), []string{`"b" is held under limit 3`, "several keys", "nothing acquired"}) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, nothing run, and b's limit named", wait, code, s.out.String(), s.err.String(), exitConfig)
		}
		if _, out, _ := runArgs(t, t.Context(), "inspect", "-redis", memoryRedis, "a"); !strings.Contains(out, "0 holder(s)") {
			t.Errorf("%v left a held:\n%s", wait, out)
		}
	}
	open()
	if code := holder.exit(t); code != exitOK {
		t.Fatalf("holder: exit %d, stderr %q", code, holder.err.String())
	}
}

// A run on several keys (a real process, on a real server) interrupted while its command runs
// passes the signal on and, once the command exits, releases every key before it exits itself.
func TestRunOnSeveralKeysInterruptedWhileRunningReleasesEveryKey(t *testing.T) {
	t.Parallel()
	url := "redis://" + redistest.StartServer(t).Addr
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := cli(ctx, "run", "-redis", url, "-key", "b", "-key", "a", "-key", "c", "-ttl", "1m", "--", "sleep", "300")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	held := func(k string) string {
		_, o, _ := runArgs(t, t.Context(), "inspect", "-redis", url, k)
		return o
	}
	for _, k := range []string{"a", "b", "c"} {
		poll.Until(t, "key "+k+" held", func() bool { return strings.Contains(held(k), "1 holder(s)") })
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code == exitOK || code == -1 {
		t.Errorf("after SIGINT: exit %d, output %q; want the interrupted command's status", code, out.String())
	}
	for _, k := range []string{"a", "b", "c"} {
		if o := held(k); !strings.Contains(o, "0 holder(s)") {
			t.Errorf("key %s once run exited (output %q):\n%s", k, out.String(), o)
		}
	}
}

// A run on a thousand keys, one of them busy, says so in one line of bounded length that names
// the busy key and counts the others, and holds none of them.
func TestRunOnAThousandKeysNamesAFewInItsMessages(t *testing.T) {
	useMemoryStore(t)
	command, open := gate(t)
	holder := start(t, append([]string{"run", "-redis", memoryRedis, "-key", "k0777", "--"}, command...)...)
	inspectUntil(t, "k0777", "1 holder(s)")
	args := []string{"run", "-redis", memoryRedis, "-n"}
	for i := range 1000 {
		args = append(args, "-key", fmt.Sprintf("k%04d", i))
	}
	s := start(t, append(args, "--", "echo", "ran")...)
	// 200 bytes, and the holder's name, its value cut to holderValueWidth.
	if code := s.exit(t); code != exitBusy || s.out.String() != "" || len(s.err.String()) > 200+len(` (held by "…")`)+holderValueWidth ||
		!containsAll(s.err.String(), []string{`"k0777" is busy`, `"k0000"`, "and 995 more"}) {
		t.Errorf("exit %d, stdout %q, stderr of %d bytes %.300q; want %d, nothing run, and one short line naming k0777 and counting the rest",
			code, s.out.String(), len(s.err.String()), s.err.String(), exitBusy)
	}
	for _, k := range []string{"k0000", "k0776"} {
		if _, out, _ := runArgs(t, t.Context(), "inspect", "-redis", memoryRedis, k); !strings.Contains(out, "0 holder(s)") {
			t.Errorf("key %s after the refused run:\n%s", k, out)
		}
	}
	open()
	if code := holder.exit(t); code != exitOK {
		t.Fatalf("holder: exit %d, stderr %q", code, holder.err.String())
	}
}
