// Package testenv holds the switches Leasehold's tests read from their environment.
//
// `go test ./...` runs every test at a length that keeps the whole suite within three minutes
// on a 2-core machine; `go test -short ./...`, the inner loop, is meant to take 45 s (it takes
// about a minute still): it skips the tests that start, stop, pause or kill real servers, and
// thins what runs on the shared ones (a Redis test on one driver, PostgreSQL's conformance suite
// and the tests on its shared tables, fewer rounds of the CLI's process races). LEASEHOLD_SOAK=1
// runs the soak and differential tests (load, long random histories) at their full length too;
// CI sets it.
package testenv

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Soak reports whether LEASEHOLD_SOAK=1 asks for soak and differential tests at full length.
func Soak() bool { return os.Getenv("LEASEHOLD_SOAK") == "1" }

// Pick returns soak under LEASEHOLD_SOAK=1 and quick otherwise: the number of rounds,
// histories or seconds a soak test runs.
func Pick[T any](quick, soak T) T {
	if Soak() {
		return soak
	}
	return quick
}

// SkipShort skips t under -short, saying why: for tests that fault, pause or kill real
// servers, or soak, which the inner loop leaves to `go test ./...`.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}

// ParallelWaiters raises the number of parallel tests a package runs at once to n, from
// GOMAXPROCS, unless -test.parallel was given: for a package whose tests mostly wait on
// servers, processes and timers, not the CPU. Call it from TestMain, before m.Run.
func ParallelWaiters(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// ParallelForWaits sets how many parallel tests a package whose tests mostly wait on servers and
// timers, not the CPU, runs at once: eight, four under -race (whose slower goroutines stretch the
// timings the tests bound), and the default under LEASEHOLD_SOAK=1, for a loaded machine's sake.
// Call it from TestMain, before m.Run.
func ParallelForWaits() {
	if Soak() {
		return
	}
	n := 8
	if Race {
		n = 4
	}
	ParallelWaiters(n)
}
