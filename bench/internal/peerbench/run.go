// Package peerbench measures Leasehold beside the lock libraries it means to replace, on servers
// it starts itself, and prints one markdown table: the commands bench/cmd/peerbench (Redis and
// PostgreSQL) and bench/pglock (PostgreSQL with cirello.io/pglock, a module of its own) are each
// Main with a Backend. Every server it starts is stopped by pid when it exits, also on an error
// or Ctrl-C.
package peerbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/bench/internal/lockers"
)

// Backend is what a run measures on: the servers and the libraries.
type Backend struct {
	// Name is what the report calls the server ("redis-server", "PostgreSQL").
	Name string
	// Launch starts the server every scenario but redlock uses, and returns its address (for
	// Lib.Mutex), its version and a function that stops it.
	Launch func() (addr, version string, stop func(), err error)
	// LaunchRedlock, when not nil, starts one of the redlock scenario's three servers.
	LaunchRedlock func() (addr string, stop func(), err error)
	// Libs are the libraries, Leasehold first, hidden ones included.
	Libs []lockers.Lib
	// Counting says how commands are counted, for the report.
	Counting string
	// Deps are the modules whose versions the report names.
	Deps []string
	// Command is how the report says the run was started, before its flags.
	Command string
	// Stats, when not nil, reads the server's counters (for the server CPU and script columns).
	Stats func(addr string) (serverStats, error)
	// Floor, when not nil, is the libraries of the floor scenario (it needs Stats).
	Floor []lockers.Shared
}

// Main runs b's benchmark with the command line's flags, prints the report, and exits non-zero
// on an error.
func Main(b Backend) {
	if err := run(b); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

// run parses the command line, runs the chosen scenarios for the chosen libraries, and prints
// the report.
func run(b Backend) error {
	e := &env{}
	o, err := parseFlags(b, e)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()

	version, stopServers, err := launch(b, e, o)
	defer stopServers()
	if err != nil {
		return err
	}
	rows, cols, err := runScenarios(ctx, e, o.libs, o.scenarios)
	if err != nil {
		return err
	}
	if o.floor {
		if err := runFloor(ctx, e, o.floorGroups, o.rounds, o.profiles); err != nil {
			return err
		}
	}

	facts := runFacts{version: version, took: time.Since(began)}
	if len(o.scenarios) > 0 {
		fmt.Print(report(rows, cols, e, b, facts))
	} else {
		fmt.Print(header(b, facts))
	}
	if o.floor {
		if len(o.scenarios) > 0 {
			fmt.Print("\n")
		}
		fmt.Print(floorReport(o.floorGroups, e, o.rounds))
	}
	return nil
}

// choices are what the command line chose: the libraries and scenarios to run, and the floor's
// groups, rounds and profile directory.
type choices struct {
	libs        []lockers.Lib
	scenarios   []scenario
	floor       bool
	floorGroups []floorGroup
	rounds      int
	profiles    string
}

// parseFlags parses the command line into e's settings and the choices it makes of b's
// libraries and scenarios.
func parseFlags(b Backend, e *env) (choices, error) {
	var o choices
	libNames, scenarioNames, onlyHelp, scenariosHelp := flagHelp(b)
	flag.DurationVar(&e.duration, "duration", 3*time.Second, "how long each throughput scenario runs")
	flag.DurationVar(&e.hold, "hold", 2*time.Second, "how long the holder keeps the lock in the idle scenario")
	flag.IntVar(&e.workers, "workers", 16, "workers in the contended, idle and semaphore scenarios, and the floor's second group")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of the floor scenario, every library once a round; its table gives the medians")
	flag.StringVar(&o.profiles, "floor-profiles", "", "a directory to write a CPU profile of each of the floor's measured windows to, as <library>-<workers>w-r<round>.pprof")
	only := flag.String("only", strings.Join(libNames, ","), onlyHelp)
	which := flag.String("scenarios", strings.Join(scenarioNames, ","), scenariosHelp)
	flag.Parse()
	if flag.NArg() > 0 || e.duration <= 0 || e.hold <= 0 || e.workers < 2 || o.rounds < 1 {
		flag.Usage()
		return choices{}, errors.New("bad arguments")
	}
	explicitOnly := false
	flag.Visit(func(f *flag.Flag) { explicitOnly = explicitOnly || f.Name == "only" })
	list, floor := cutFloor(*which)
	o.floor = floor
	if floor && b.Floor == nil {
		return choices{}, errors.New("-scenarios: no floor on " + b.Name)
	}
	libList, floorNames, err := splitOnly(b, *only, explicitOnly && floor)
	if err != nil {
		return choices{}, err
	}
	if list != "" || !floor {
		if o.libs, err = pickLibs(b.Libs, libList); err != nil {
			return choices{}, err
		}
		if o.scenarios, err = pickScenarios(list); err != nil {
			return choices{}, err
		}
	}
	if floor {
		o.floorGroups = floorGroups(pickFloor(b.Floor, floorNames), e.workers)
		if len(o.floorGroups) == 0 {
			return choices{}, errors.New("-only: no floor libraries")
		}
	}
	return o, nil
}

// flagHelp returns the default -only and -scenarios lists of b, and their help texts, which name
// the hidden libraries and the floor's.
func flagHelp(b Backend) (libNames, scenarioNames []string, onlyHelp, scenariosHelp string) {
	var hidden []string
	for _, l := range b.Libs {
		if l.Hidden {
			hidden = append(hidden, l.Name)
		} else {
			libNames = append(libNames, l.Name)
		}
	}
	for _, s := range scenarios {
		if s.name != "redlock" || b.LaunchRedlock != nil {
			scenarioNames = append(scenarioNames, s.name)
		}
	}
	onlyHelp = "comma-separated libraries to run; also: " + strings.Join(hidden, ",")
	scenariosHelp = "comma-separated scenarios to run"
	if b.Floor != nil {
		var floorNames []string
		for _, l := range b.Floor {
			floorNames = append(floorNames, l.Name)
		}
		onlyHelp += "; the floor's (all unless named): " + strings.Join(floorNames, ",")
		scenariosHelp += "; also: floor (the uncontended pair on a shared client, with client and server CPU)"
	}
	return libNames, scenarioNames, onlyHelp, scenariosHelp
}

// launch starts the server and, when a chosen scenario or floor library needs them, the three
// Redlock servers, and sets their addresses in e. It returns the server's version and a
// function that stops every server it started, also those started before an error.
func launch(b Backend, e *env, o choices) (version string, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	addr, version, stopServer, err := b.Launch()
	if err != nil {
		return "", stop, err
	}
	stops = append(stops, stopServer)
	e.addr = addr
	e.stats = b.Stats
	needRedlock := slices.ContainsFunc(o.scenarios, func(s scenario) bool { return s.name == "redlock" }) ||
		slices.ContainsFunc(o.floorGroups, func(g floorGroup) bool { return g.rows[0].lib.Redlock })
	if !needRedlock {
		return version, stop, nil
	}
	if b.LaunchRedlock == nil {
		return "", stop, errors.New("-scenarios: no redlock on " + b.Name)
	}
	for range 3 {
		addr, stopOne, err := b.LaunchRedlock()
		if err != nil {
			return "", stop, err
		}
		stops = append(stops, stopOne)
		e.redlock = append(e.redlock, addr)
	}
	return version, stop, nil
}

// runScenarios runs each of scenarios for each of libs it applies to, printing progress to
// stderr, and returns a row per library and the scenarios' columns.
func runScenarios(ctx context.Context, e *env, libs []lockers.Lib, scenarios []scenario) ([]*row, []column, error) {
	var rows []*row
	for _, l := range libs {
		rows = append(rows, newRow(l))
	}
	var cols []column
	for _, s := range scenarios {
		cols = append(cols, s.columns...)
		for _, r := range rows {
			if !s.applies(r.lib) {
				continue
			}
			t := time.Now()
			fmt.Fprintf(os.Stderr, "%-12s %-18s ", s.name, r.lib.Name)
			limit := e.duration + e.hold + 2*grace + 20*time.Second
			res, err := bounded(ctx, limit, func(ctx context.Context) (result, error) { return s.run(ctx, e, r.lib) })
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr)
				return nil, nil, errors.New("interrupted")
			}
			r.record(s, res, err, limit)
			fmt.Fprintf(os.Stderr, "%6.1fs %s\n", time.Since(t).Seconds(), summary(s, r))
			runtime.GC()
		}
	}
	return rows, cols, nil
}

// cutFloor takes "floor" out of a -scenarios list, and says whether it was there.
func cutFloor(list string) (rest string, floor bool) {
	var keep []string
	for _, name := range strings.Split(list, ",") {
		if strings.TrimSpace(name) == "floor" {
			floor = true
		} else {
			keep = append(keep, name)
		}
	}
	return strings.Join(keep, ","), floor
}

// splitOnly splits the -only list into the names of b's libraries and those of its floor's.
// Unless shared (-only named with the floor chosen), the whole list is the libraries' and the
// floor runs all of its own. A shared name neither knows is an error.
func splitOnly(b Backend, list string, shared bool) (libs string, floor []string, err error) {
	if !shared {
		return list, nil, nil
	}
	var keep []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		isLib := slices.ContainsFunc(b.Libs, func(l lockers.Lib) bool { return l.Name == name })
		isFloor := slices.ContainsFunc(b.Floor, func(l lockers.Shared) bool { return l.Name == name })
		if !isLib && !isFloor {
			return "", nil, fmt.Errorf("-only: no library %q", name)
		}
		if isLib {
			keep = append(keep, name)
		}
		if isFloor {
			floor = append(floor, name)
		}
	}
	if len(floor) == 0 {
		return "", nil, errors.New("-only: no floor libraries")
	}
	return strings.Join(keep, ","), floor, nil
}

var errTimeout = errors.New("timeout")

// record puts a scenario's outcome in the row: its figures, or "timeout" or "error" in each of
// its columns.
func (r *row) record(s scenario, res result, err error, limit time.Duration) {
	switch {
	case errors.Is(err, errTimeout):
		for _, c := range s.columns {
			r.cells[c] = cell{text: "timeout"}
		}
		r.notes = append(r.notes, fmt.Sprintf("%s: did not finish within %v; abandoned", s.name, limit))
	case err != nil:
		for _, c := range s.columns {
			r.cells[c] = cell{text: "error"}
		}
		r.notes = append(r.notes, fmt.Sprintf("%s: %v", s.name, err))
	default:
		for c, v := range res.cells {
			r.cells[c] = v
		}
		r.notes = append(r.notes, res.notes...)
		r.cmds = append(r.cmds, res.breakdowns...)
	}
}

// bounded runs f with ctx and gives up on it after limit, leaving it running.
func bounded[T any](ctx context.Context, limit time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		r   T
		err error
	}
	ch := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- outcome{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		r, err := f(ctx)
		ch <- outcome{r: r, err: err}
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case o := <-ch:
		return o.r, o.err
	case <-t.C:
		var zero T
		return zero, errTimeout
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func summary(s scenario, r *row) string {
	sp := specs(0)
	var parts []string
	for _, c := range s.columns {
		if v := r.cells[c]; v.ok {
			parts = append(parts, fmt.Sprintf("%s=%s", c, sp[c].format(v.v)))
		} else {
			parts = append(parts, fmt.Sprintf("%s=%s", c, v.text))
		}
	}
	return strings.Join(parts, " ")
}

func pickLibs(libs []lockers.Lib, list string) ([]lockers.Lib, error) {
	var chosen []lockers.Lib
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(libs, func(l lockers.Lib) bool { return l.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("-only: no library %q", name)
		}
		chosen = append(chosen, libs[i])
	}
	if len(chosen) == 0 {
		return nil, errors.New("-only: no libraries")
	}
	return chosen, nil
}

func pickScenarios(list string) ([]scenario, error) {
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == name }) {
			return nil, fmt.Errorf("-scenarios: no scenario %q", name)
		}
		want[name] = true
	}
	var chosen []scenario
	for _, s := range scenarios {
		if want[s.name] {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 {
		return nil, errors.New("-scenarios: none")
	}
	return chosen, nil
}
