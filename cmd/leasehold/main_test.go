package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, _ := runArgs(t, args...)
		if code != exitOK || !strings.Contains(out, "demo") || !strings.Contains(out, "Usage") {
			t.Errorf("%v: exit %d, output %q; want 0 and the usage", args, code, out)
		}
	}
	code, _, errOut := runArgs(t)
	if code != exitUsage || !strings.Contains(errOut, "Usage") {
		t.Errorf("no arguments: exit %d, stderr %q; want %d and the usage", code, errOut, exitUsage)
	}
}

func TestDemoHelp(t *testing.T) {
	code, out, _ := runArgs(t, "demo", "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"-workers", "-limit", "-duration", "-ttl", "lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo --help does not mention %q:\n%s", want, out)
		}
	}
}

func TestBadCommandLines(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"dmeo"}, `unknown command "dmeo"`},
		{[]string{"demo", "-limit", "0"}, "-limit 0"},
		{[]string{"demo", "-workers", "0"}, "-workers 0"},
		{[]string{"demo", "-duration", "-1s"}, "-duration"},
		{[]string{"demo", "-ttl", "1ms"}, "-ttl 1ms"},
		{[]string{"demo", "-limit", "many"}, "-limit"},
		{[]string{"demo", "-nope"}, "-nope"},
		{[]string{"demo", "extra"}, `unexpected argument "extra"`},
	}
	for _, tc := range tests {
		code, out, errOut := runArgs(t, tc.args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d", tc.args, code, exitUsage)
		}
		if !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "--help") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: stderr %q, want one line naming %q with a usage hint", tc.args, errOut, tc.want)
		}
		if out != "" {
			t.Errorf("%v: the demo ran: %q", tc.args, out)
		}
	}
}

func TestDemoHoldsTheLimitAndShowsLoss(t *testing.T) {
	var out bytes.Buffer
	err := runDemo(context.Background(), &out, demoConfig{workers: 5, limit: 2, duration: time.Second, ttl: 100 * time.Millisecond, seed: 7})
	text := out.String()
	if err != nil {
		t.Fatalf("runDemo: %v\n%s", err, text)
	}
	for _, want := range []string{" LOST ", "leasehold: lease lost", "OK: the limit held"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	m := regexp.MustCompile(`at most (\d+) permits held at once by the workers, (\d+) by the store's count; (\d+) grants`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no semaphore summary in:\n%s", text)
	}
	for _, s := range m[1:3] {
		if n, _ := strconv.Atoi(s); n > 2 || n < 1 {
			t.Errorf("summary reports %d permits at once, limit 2", n)
		}
	}
	if n, _ := strconv.Atoi(m[3]); n < 5 {
		t.Errorf("only %d grants: the workers hardly ran", n)
	}
	mm := regexp.MustCompile(`at most (\d+) holder at once; (\d+) grants`).FindStringSubmatch(text)
	if mm == nil || mm[1] != "1" || mm[2] == "0" {
		t.Errorf("mutex summary missing or wrong, want at most 1 holder and some grants:\n%s", text)
	}
}

func TestDemoStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	start := time.Now()
	runDemo(ctx, &out, demoConfig{workers: 3, limit: 2, duration: time.Hour, ttl: time.Second, seed: 1})
	if time.Since(start) > 10*time.Second {
		t.Errorf("a canceled demo ran for %v", time.Since(start))
	}
}
