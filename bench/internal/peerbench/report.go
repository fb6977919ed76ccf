package peerbench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

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
