// Package peerbench measures Leasehold beside the lock libraries it means to replace, on servers
// it starts itself, and prints one markdown table: the commands bench/cmd/peerbench (Redis and
// PostgreSQL) and bench/pglock (PostgreSQL with cirello.io/pglock, a module of its own) are each
// Main with a Backend. Every server it starts is stopped by pid when it exits, also on an error
// or Ctrl-C.
package peerbench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
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
	var names, hidden, scenarioNames []string
	for _, l := range b.Libs {
		if l.Hidden {
			hidden = append(hidden, l.Name)
		} else {
			names = append(names, l.Name)
		}
	}
	for _, s := range scenarios {
		if s.name != "redlock" || b.LaunchRedlock != nil {
			scenarioNames = append(scenarioNames, s.name)
		}
	}
	onlyHelp := "comma-separated libraries to run; also: " + strings.Join(hidden, ",")
	scenariosHelp := "comma-separated scenarios to run"
	if b.Floor != nil {
		var floorNames []string
		for _, l := range b.Floor {
			floorNames = append(floorNames, l.Name)
		}
		onlyHelp += "; the floor's (all unless named): " + strings.Join(floorNames, ",")
		scenariosHelp += "; also: floor (the uncontended pair on a shared client, with client and server CPU)"
	}
	e := &env{}
	flag.DurationVar(&e.duration, "duration", 3*time.Second, "how long each throughput scenario runs")
	flag.DurationVar(&e.hold, "hold", 2*time.Second, "how long the holder keeps the lock in the idle scenario")
	flag.IntVar(&e.workers, "workers", 16, "workers in the contended, idle and semaphore scenarios, and the floor's second group")
	rounds := flag.Int("rounds", 3, "rounds of the floor scenario, every library once a round; its table gives the medians")
	profiles := flag.String("floor-profiles", "", "a directory to write a CPU profile of each of the floor's measured windows to, as <library>-<workers>w-r<round>.pprof")
	only := flag.String("only", strings.Join(names, ","), onlyHelp)
	which := flag.String("scenarios", strings.Join(scenarioNames, ","), scenariosHelp)
	flag.Parse()
	if flag.NArg() > 0 || e.duration <= 0 || e.hold <= 0 || e.workers < 2 || *rounds < 1 {
		flag.Usage()
		return errors.New("bad arguments")
	}
	explicitOnly := false
	flag.Visit(func(f *flag.Flag) { explicitOnly = explicitOnly || f.Name == "only" })
	list, floor := cutFloor(*which)
	if floor && b.Floor == nil {
		return errors.New("-scenarios: no floor on " + b.Name)
	}
	libNames, floorNames, err := splitOnly(b, *only, explicitOnly && floor)
	if err != nil {
		return err
	}
	var chosen []lockers.Lib
	var chosenScenarios []scenario
	if list != "" || !floor {
		if chosen, err = pickLibs(b.Libs, libNames); err != nil {
			return err
		}
		if chosenScenarios, err = pickScenarios(list); err != nil {
			return err
		}
	}
	var floorGs []floorGroup
	if floor {
		floorGs = floorGroups(pickFloor(b.Floor, floorNames), e.workers)
		if len(floorGs) == 0 {
			return errors.New("-only: no floor libraries")
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()

	addr, version, stopServer, err := b.Launch()
	if err != nil {
		return err
	}
	defer stopServer()
	e.addr = addr
	e.stats = b.Stats
	needRedlock := slices.ContainsFunc(chosenScenarios, func(s scenario) bool { return s.name == "redlock" }) ||
		slices.ContainsFunc(floorGs, func(g floorGroup) bool { return g.rows[0].lib.Redlock })
	if needRedlock {
		if b.LaunchRedlock == nil {
			return errors.New("-scenarios: no redlock on " + b.Name)
		}
		for range 3 {
			addr, stop, err := b.LaunchRedlock()
			if err != nil {
				return err
			}
			defer stop()
			e.redlock = append(e.redlock, addr)
		}
	}

	var rows []*row
	for _, l := range chosen {
		rows = append(rows, newRow(l))
	}
	var cols []column
	for _, s := range chosenScenarios {
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
				return errors.New("interrupted")
			}
			r.record(s, res, err, limit)
			fmt.Fprintf(os.Stderr, "%6.1fs %s\n", time.Since(t).Seconds(), summary(s, r))
			runtime.GC()
		}
	}
	if floor {
		if err := runFloor(ctx, e, floorGs, *rounds, *profiles); err != nil {
			return err
		}
	}

	facts := runFacts{version: version, took: time.Since(began)}
	if len(chosenScenarios) > 0 {
		fmt.Print(report(rows, cols, e, b, facts))
	} else {
		fmt.Print(header(b, facts))
	}
	if floor {
		if len(chosenScenarios) > 0 {
			fmt.Print("\n")
		}
		fmt.Print(floorReport(floorGs, e, *rounds))
	}
	return nil
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

// runFacts is what report says of the run itself: the server's version and how long it took.
type runFacts struct {
	version string
	took    time.Duration
}

// header is the report's opening: the machine, the command and the libraries' versions.
func header(be Backend, run runFacts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s, %d cores (GOMAXPROCS %d), %s/%s, %s, %s %s on loopback\n\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), be.Name, run.version)
	fmt.Fprintf(&b, "Command: `%s` (took %s)\n\n", commandLine(be.Command), run.took.Round(time.Second))
	fmt.Fprintf(&b, "Libraries: Leasehold from this tree (%s); %s\n\n", treeState(), depVersions(be.Deps))
	return b.String()
}

func report(rows []*row, cols []column, e *env, be Backend, run runFacts) string {
	var b strings.Builder
	b.WriteString(header(be, run))
	b.WriteString(table(rows, e.workers, cols))
	fmt.Fprintf(&b, "\nEach figure is followed by its ratio to the best peer in its column (figure ÷ best peer; "+
		"↑ higher is better, ↓ lower is better). Throughput scenarios run %v each; every worker has its own client "+
		"connection (Leasehold: its own client and Store). A handoff is a grant to another worker, timed from the "+
		"moment the holder starts its release to the moment that worker's acquire returns; a worker taking the "+
		"lock straight back hands nothing over and is not timed. %s The idle figure counts "+
		"the commands of the holder and %d waiters over the middle %v of a %v hold; the first grant after it is "+
		"timed from the moment the holder starts its release to the return of the first waiter's acquire.\n",
		e.duration, be.Counting, e.workers, min(time.Second, e.hold/2), e.hold)
	b.WriteString("\nRead the contended columns beside \"grants to another worker\": a library whose releasing worker " +
		"mostly takes the lock straight back hands it on rarely, so its pairs/s and handoff times are mostly one " +
		"worker's. Columns with no peer figure, or whose best peer figure is 0, carry no ratios.\n")
	b.WriteString("\nConfigurations:\n\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "- %s: %s\n", r.lib.Label, r.lib.Config)
	}
	var caveats []string
	for _, r := range rows {
		if r.lib.Caveat != "" {
			caveats = append(caveats, fmt.Sprintf("- %s: %s", r.lib.Label, r.lib.Caveat))
		}
	}
	if len(caveats) > 0 {
		b.WriteString("\nKnown behaviour behind some figures:\n\n" + strings.Join(caveats, "\n") + "\n")
	}
	var notes []string
	for _, r := range rows {
		for _, n := range r.notes {
			notes = append(notes, fmt.Sprintf("- %s, %s", r.lib.Label, n))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes († marks a figure measured with stranded waiters; it is not used as a best peer):\n\n")
		b.WriteString(strings.Join(notes, "\n") + "\n")
	}
	b.WriteString("\nCommands by name:\n\n")
	for _, r := range rows {
		for _, c := range r.cmds {
			fmt.Fprintf(&b, "- %s, %s: %s\n", r.lib.Label, c.label, commandMix(c))
		}
	}
	return b.String()
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func commandLine(command string) string {
	parts := []string{command}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t'\"$\\`*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// treeState names the commit of the working tree, marked dirty if it has uncommitted changes.
func treeState() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "commit unknown"
	}
	state := "commit " + strings.TrimSpace(string(out))
	if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
		state += " with uncommitted changes"
	}
	return state
}

func depVersions(deps []string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "versions unknown"
	}
	var parts []string
	for _, d := range info.Deps {
		if slices.Contains(deps, d.Path) {
			v := d.Version
			if d.Replace != nil {
				v += " (replaced by " + d.Replace.Path + ")"
			}
			parts = append(parts, d.Path+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}
