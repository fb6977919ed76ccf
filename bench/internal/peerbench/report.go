package peerbench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/bench/internal/lockers"
)

// column is one metric of the table.
type column int

const (
	colUncontended column = iota
	colServerCPU
	colScript
	colContended
	colP50
	colP99
	colCmds
	colOther
	colIdle
	colWake
	colSemaphore
	colRedlock
	numColumns
)

// String names the column in notes.
func (c column) String() string {
	return [...]string{"uncontended", "server CPU per pair", "script time per call", "contended", "handoff p50", "handoff p99", "commands/handoff",
		"grants to another worker", "idle wait", "wake after a long hold", "Semaphore(4)", "Redlock(3)"}[c]
}

// spec says how a column is headed, judged and printed.
type spec struct {
	title  string
	higher bool // higher is better; otherwise lower is
	ratio  bool // figures carry their ratio to the best peer
	format func(float64) string
}

func specs(workers int) [numColumns]spec {
	w := strconv.Itoa(workers)
	return [numColumns]spec{
		colUncontended: {title: "Uncontended pairs/s (1 worker) ↑", higher: true, ratio: true, format: integer},
		colServerCPU:   {title: "Server CPU µs per uncontended pair (INFO cpu) ↓", higher: false, ratio: true, format: small},
		colScript:      {title: "Script µs per call, uncontended (commandstats) ↓", higher: false, ratio: true, format: small},
		colContended:   {title: w + " workers, 1 key: pairs/s ↑", higher: true, ratio: true, format: integer},
		colP50:         {title: "Handoff p50 µs ↓", higher: false, ratio: true, format: small},
		colP99:         {title: "Handoff p99 µs ↓", higher: false, ratio: true, format: small},
		colCmds:        {title: "Commands/handoff ↓", higher: false, ratio: true, format: fixed2},
		colOther:       {title: "Grants to another worker (no ratio)", higher: true, ratio: false, format: percent},
		colIdle:        {title: "Commands/s, " + w + " waiting ↓", higher: false, ratio: true, format: small},
		colWake:        {title: "First grant after a long hold's release µs ↓", higher: false, ratio: true, format: small},
		colSemaphore:   {title: "Semaphore(" + strconv.Itoa(semaphoreLimit) + "), " + w + " workers: acquires/s ↑", higher: true, ratio: true, format: integer},
		colRedlock:     {title: "Redlock(3) pairs/s (1 worker) ↑", higher: true, ratio: true, format: integer},
	}
}

// cell is one figure of the table, or why there is none.
type cell struct {
	v        float64
	ok       bool   // v is a figure
	text     string // shown instead when !ok: "—", "timeout", "error"
	stranded bool   // measured with waiters stranded: flagged and not a best peer
}

// row is one library's line.
type row struct {
	lib   lockers.Lib
	cells [numColumns]cell
	notes []string
	cmds  []breakdown
}

func newRow(l lockers.Lib) *row {
	r := &row{lib: l}
	for i := range r.cells {
		r.cells[i] = cell{text: "—"}
	}
	return r
}

// best returns the best figure among the peers' in col, and whether there is one.
func best(rows []*row, col column, higher bool) (float64, bool) {
	var b float64
	found := false
	for _, r := range rows {
		c := r.cells[col]
		if !r.lib.Peer || !c.ok || c.stranded {
			continue
		}
		if !found || (higher && c.v > b) || (!higher && c.v < b) {
			b, found = c.v, true
		}
	}
	return b, found
}

// table renders rows as one markdown table: each figure followed by its ratio to the best peer
// in its column (figure ÷ best peer).
func table(rows []*row, workers int, cols []column) string {
	sp := specs(workers)
	var b strings.Builder
	b.WriteString("| Library |")
	for _, c := range cols {
		b.WriteString(" " + sp[c].title + " |")
	}
	b.WriteString("\n|:---|")
	for range cols {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + r.lib.Label + " |")
		for _, col := range cols {
			c, s := r.cells[col], sp[col]
			b.WriteString(" ")
			switch {
			case !c.ok:
				b.WriteString(c.text)
			default:
				b.WriteString(s.format(c.v))
				if bv, found := best(rows, col, s.higher); s.ratio && found && bv > 0 {
					b.WriteString(" (" + ratio(c.v, bv) + ")")
				}
				if c.stranded {
					b.WriteString(" †")
				}
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func ratio(v, best float64) string {
	r := v / best
	if r >= 100 {
		return fmt.Sprintf("%.0f×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

// integer prints v rounded, with thin groups of three digits: 12 400.
func integer(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	var b strings.Builder
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// small prints v with one decimal below 100, as an integer above.
func small(v float64) string {
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return integer(v)
}

func fixed2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func percent(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "%" }

// commandMix prints a breakdown's commands, most frequent first: "EVALSHA 3.10, SET 1.02".
func commandMix(b breakdown) string {
	if b.per == 0 || len(b.cmds) == 0 {
		return "none"
	}
	names := make([]string, 0, len(b.cmds))
	for n := range b.cmds {
		names = append(names, n)
	}
	slices.SortFunc(names, func(x, y string) int {
		if d := b.cmds[y] - b.cmds[x]; d != 0 {
			return int(d)
		}
		return strings.Compare(x, y)
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %s", n, small(float64(b.cmds[n])/b.per)))
	}
	return strings.Join(parts, ", ")
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
