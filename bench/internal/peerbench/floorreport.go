package peerbench

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
)

// roundRatios says each row's ratios to g's base in round, for the progress lines.
func roundRatios(g floorGroup, round int) string {
	base := g.base()
	if base == nil {
		return ""
	}
	var parts []string
	for _, r := range g.rows {
		if r == base {
			continue
		}
		one := &floorRow{samples: slices.DeleteFunc(slices.Clone(r.samples), func(s floorSample) bool { return s.round != round })}
		if q, ok := one.ratios(base); ok {
			parts = append(parts, fmt.Sprintf("%s %s %s %s", r.lib.Name, fixed2(q.rate), fixed2(q.client), fixed2(q.server)))
		}
	}
	return strings.Join(parts, "; ")
}

// median returns the median of xs (the mean of the middle two for an even count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medians returns the medians of r's samples, each figure on its own, and whether it has any.
func (r *floorRow) medians() (floorSample, bool) {
	if len(r.samples) == 0 {
		return floorSample{}, false
	}
	pick := func(f func(floorSample) float64) float64 {
		xs := make([]float64, len(r.samples))
		for i, s := range r.samples {
			xs[i] = f(s)
		}
		return median(xs)
	}
	return floorSample{
		rate:   pick(func(s floorSample) float64 { return s.rate }),
		client: pick(func(s floorSample) float64 { return s.client }),
		server: pick(func(s floorSample) float64 { return s.server }),
	}, true
}

// ratios returns, figure by figure, the median over the rounds that both r and base measured of
// r's figure ÷ base's in that round, and whether there was such a round (NaN for a figure whose
// base was 0 in every such round).
func (r *floorRow) ratios(base *floorRow) (floorSample, bool) {
	var rate, client, server []float64
	add := func(xs *[]float64, v, b float64) {
		if b > 0 {
			*xs = append(*xs, v/b)
		}
	}
	found := false
	for _, s := range r.samples {
		for _, bs := range base.samples {
			if bs.round == s.round {
				found = true
				add(&rate, s.rate, bs.rate)
				add(&client, s.client, bs.client)
				add(&server, s.server, bs.server)
			}
		}
	}
	m := func(xs []float64) float64 {
		if len(xs) == 0 {
			return math.NaN()
		}
		return median(xs)
	}
	return floorSample{rate: m(rate), client: m(client), server: m(server)}, found
}

// floorTables renders each group as a markdown table of medians over rounds, each figure
// followed by the median of its per-round ratios to the group's base row's.
func floorTables(gs []floorGroup, rounds int) string {
	var b strings.Builder
	for i, g := range gs {
		if i > 0 {
			b.WriteString("\n")
		}
		base := g.base()
		baseLabel := "its base"
		if base != nil {
			baseLabel = base.lib.Label
		}
		fmt.Fprintf(&b, "%s (medians of %s; ratios to %s):\n\n", g.title, plural(rounds, "round"), baseLabel)
		b.WriteString("| Library | pairs/s ↑ | client CPU µs/pair ↓ | server CPU µs/pair ↓ |\n|:---|---:|---:|---:|\n")
		for _, r := range g.rows {
			b.WriteString("| " + r.lib.Label + " |")
			m, ok := r.medians()
			if !ok {
				b.WriteString(" error | error | error |\n")
				continue
			}
			var q floorSample
			qOK := false
			if base != nil {
				q, qOK = r.ratios(base)
			}
			for _, f := range []struct {
				v, q   float64
				format func(float64) string
			}{{m.rate, q.rate, integer}, {m.client, q.client, small}, {m.server, q.server, small}} {
				b.WriteString(" " + f.format(f.v))
				if qOK && !math.IsNaN(f.q) {
					b.WriteString(" (" + ratio(f.q, 1) + ")")
				}
				if len(r.samples) < rounds {
					fmt.Fprintf(&b, " ‡%d", len(r.samples))
				}
				b.WriteString(" |")
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// floorReport is the floor scenario's section of the report: its tables, how they were
// measured, the libraries' configurations, and the notes of failed rounds and errors.
func floorReport(gs []floorGroup, e *env, rounds int) string {
	var b strings.Builder
	b.WriteString("The floor: the uncontended lock/unlock pair in this one process, every worker of a library on one " +
		"client shared by all of them (one client per server for Redlock).\n\n")
	b.WriteString(floorTables(gs, rounds))
	fmt.Fprintf(&b, "\nEvery library runs once per round, all of them in turn (each round starts a table one row "+
		"further down, so every library takes every place in the order), %s of %v each; a figure is the "+
		"median over the rounds, and its ratio the median over the rounds of the figure ÷ the base library's in the "+
		"same round (↑ higher is better, ↓ lower is better; ‡n: only n rounds measured, see the notes). Pairs/s counts the pairs whose acquire returned within "+
		"the window. Client CPU is this process's user + system CPU over the window (getrusage RUSAGE_SELF, after a "+
		"GC; connecting, loading scripts and five warm-up pairs per worker, all workers at once, come before it) ÷ pairs: the libraries never "+
		"run at once, and the harness's own loop, the same for all, is in it. Server CPU is redis-server's "+
		"used_cpu_user + used_cpu_sys (INFO cpu) over the window ÷ pairs, summed over the three servers for "+
		"Redlock.\n", plural(rounds, "round"), e.duration)
	b.WriteString("\nConfigurations:\n\n")
	seen := map[string]bool{}
	for _, g := range gs {
		for _, r := range g.rows {
			if !seen[r.lib.Name] {
				seen[r.lib.Name] = true
				fmt.Fprintf(&b, "- %s: %s\n", r.lib.Label, r.lib.Config)
			}
		}
	}
	if line := othersLine(gs); line != "" {
		b.WriteString("\n" + line + "\n")
	}
	b.WriteString("\nServer commands per pair, all rounds (INFO commandstats: a script's or function's own commands " +
		"are counted beside the EVALSHA or FCALL that ran them; a subcommand under its command):\n\n")
	for _, g := range gs {
		for _, r := range g.rows {
			fmt.Fprintf(&b, "- %s, %s: %s\n", r.lib.Label, plural(r.workers, "worker"),
				commandMix(breakdown{cmds: r.cmds, per: float64(r.pairs)}))
		}
	}
	var notes []string
	for _, g := range gs {
		for _, r := range g.rows {
			for _, n := range r.notes {
				notes = append(notes, fmt.Sprintf("- %s, %s, %s", r.lib.Label, plural(r.workers, "worker"), n))
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nNotes:\n\n" + strings.Join(notes, "\n") + "\n")
	}
	return b.String()
}

// othersLine says how busy the machine's other processes kept it during the windows: a figure
// measured beside them is noisy, a 1-worker one most (its pairs wait on the scheduler).
func othersLine(gs []floorGroup) string {
	var xs []float64
	for _, g := range gs {
		for _, r := range g.rows {
			for _, s := range r.samples {
				if s.others >= 0 {
					xs = append(xs, s.others)
				}
			}
		}
	}
	if len(xs) == 0 {
		return ""
	}
	return fmt.Sprintf("Other processes on the machine (its CPU in /proc/stat, less this process's and the servers') "+
		"used %s cores in the median window, %s in the busiest, of %d: a figure measured beside them is noisy, a "+
		"1-worker one most, and its ratios are worth more than its level.", fixed2(median(xs)), fixed2(slices.Max(xs)), runtime.NumCPU())
}
