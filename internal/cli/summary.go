package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/core"
)

// demoReport is what a run of the demo measured.
type demoReport struct {
	poolAcquired, lockAcquired int // successful Acquire calls on each key, the expiring lease's included
	maxInUse                   int // most semaphore permits held at once, by the workers' count
	storeMaxInUse              int // most semaphore permits in use right after a grant, by Inspect
	maxLockHolders             int // most mutex holders at once, by the workers' count
	storeMaxLockHolders        int // most mutex holders right after a grant, by Inspect
	poolGrants, lockGrants     int // grants the store made on each key
	fencesIncreasing           bool
	leaseLost                  bool     // the lease let expire was reported lost, and Release said so
	problems                   []string // failed checks
}

// summary runs the final checks, prints the summary and returns the report. From then on, lines
// are no longer printed.
func (d *demo) summary(interrupted bool) demoReport {
	pool, lock := d.store.record(poolKey), d.store.record(lockKey)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	rep := d.checkLocked(pool, lock)
	d.printSummaryLocked(rep, interrupted)
	return rep
}

// checkLocked returns the report of the run, with the problems the workers met and those the
// final checks of the store's records of both keys (pool, lock) find. d.mu must be held.
func (d *demo) checkLocked(pool, lock keyRecord) demoReport {
	rep := demoReport{
		poolAcquired:        int(d.poolAcquired.Load()),
		lockAcquired:        int(d.lockAcquired.Load()),
		maxInUse:            d.poolInUse.max(),
		storeMaxInUse:       pool.peakInUse,
		maxLockHolders:      d.lockHolders.max(),
		storeMaxLockHolders: lock.peakHolders,
		poolGrants:          pool.grants,
		lockGrants:          lock.grants,
		fencesIncreasing:    pool.backwards == 0 && lock.backwards == 0,
		leaseLost:           d.leaseLost,
	}
	problems := slices.Clone(d.problems)
	if rep.maxInUse > d.cfg.limit {
		problems = append(problems, fmt.Sprintf("the workers held %d permits of %q at once, limit %d", rep.maxInUse, poolKey, d.cfg.limit))
	}
	if rep.storeMaxInUse > d.cfg.limit {
		problems = append(problems, fmt.Sprintf("the store counted %d permits of %q in use, limit %d", rep.storeMaxInUse, poolKey, d.cfg.limit))
	}
	if rep.maxLockHolders > 1 || rep.storeMaxLockHolders > 1 {
		problems = append(problems, fmt.Sprintf("mutex %q had %d holders at once by the workers' count, %d by the store's",
			lockKey, rep.maxLockHolders, rep.storeMaxLockHolders))
	}
	for _, r := range []keyRecord{pool, lock} {
		if r.backwards > 0 {
			problems = append(problems, fmt.Sprintf("%d fence(s) did not increase; %s", r.backwards, r.firstBad))
		}
		if r.inspectErr != nil {
			problems = append(problems, fmt.Sprintf("inspect after a grant: %v", r.inspectErr))
		}
	}
	rep.problems = problems
	return rep
}

// printSummaryLocked prints the summary of rep, a run that was interrupted or not: a row per
// figure, then the result and each problem. d.mu must be held.
func (d *demo) printSummaryLocked(rep demoReport, interrupted bool) {
	w := d.w
	fmt.Fprintf(w, "\nsummary after %.2fs", time.Since(d.start).Seconds())
	if interrupted {
		fmt.Fprint(w, " (interrupted)")
	}
	fmt.Fprintf(w, "\n")
	row := func(label, format string, args ...any) {
		for _, line := range wrap(fmt.Sprintf(format, args...), fmt.Sprintf("  %-22s ", label), strings.Repeat(" ", 25), lineWidth) {
			fmt.Fprintln(w, line)
		}
	}
	row("acquisitions", "%d on %s, %d on %s", rep.poolAcquired, poolKey, rep.lockAcquired, lockKey)
	row("most permits at once", "%d of %d on %s by the workers' count, %d by the store's (Inspect after each grant)",
		rep.maxInUse, d.cfg.limit, poolKey, rep.storeMaxInUse)
	row("most mutex holders", "%d on %s by the workers' count, %d by the store's", rep.maxLockHolders, lockKey, rep.storeMaxLockHolders)
	if rep.fencesIncreasing {
		row("fences", "strictly increasing in grant order (%d grants on %s, %d on %s)", rep.poolGrants, poolKey, rep.lockGrants, lockKey)
	} else {
		row("fences", "WENT BACKWARDS (%d grants on %s, %d on %s)", rep.poolGrants, poolKey, rep.lockGrants, lockKey)
	}
	if d.fence0 != 0 {
		row("", "shown less the first, %d", d.fence0)
	}
	switch {
	case d.leaseLost:
		row("expired lease", "TTL %v, no refresh: reported lost at %.3fs to OnLost, and by Release() when w1 woke", d.stallTTL, d.lostAt.Seconds())
	case !d.stalled && interrupted:
		row("expired lease", "none: interrupted before w1 took it")
	case !d.stalled:
		row("expired lease", "none: the run ended before w1 took it")
	case interrupted && d.lostAt == 0:
		row("expired lease", "none: interrupted before its TTL ran out")
	default:
		row("expired lease", "loss not reported as it should be (see below)")
	}
	for _, n := range d.notes {
		row("note", "%s", n)
	}
	if len(rep.problems) == 0 {
		if interrupted {
			row("result", "OK as far as it went: no limit exceeded, no fence went backwards")
		} else {
			row("result", "OK: no limit exceeded, no fence went backwards")
		}
		return
	}
	row("result", "FAILED")
	for _, p := range rep.problems {
		for _, line := range wrap(p, "    - ", "      ", lineWidth) {
			fmt.Fprintln(w, line)
		}
	}
}

// happening is what a worker did with a lease: who, what, how many holders of the lease's size
// it adds to the key's count (-1 when it lets go), and a note. When fenceNote is set, the note
// is a format whose %s is that fence as the table shows fences.
type happening struct {
	who, what, note string
	delta           int
	fenceNote       uint64
}

// event prints one line about lease l: the time, the worker, what happened, the lease, and the
// key's holders and permits once h.delta holders of the lease's size are counted. After runDemo
// has returned it prints nothing.
func (d *demo) event(l core.Lease, h happening) {
	who, what, delta, note := h.who, h.what, h.delta, h.note
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	t := d.shown[l.Key()]
	t.holders += delta
	t.permits += delta * l.Permits()
	limit := d.cfg.limit
	if l.Key() == lockKey {
		limit = 1
	}
	if d.fence0 == 0 {
		d.fence0 = l.Fence()
	}
	if h.fenceNote != 0 {
		note = fmt.Sprintf(note, d.shownFence(h.fenceNote))
	}
	d.printRow(tableRow{at: fmt.Sprintf("%.3fs", time.Since(d.start).Seconds()), who: who, what: what, key: l.Key(),
		permits: fmt.Sprint(l.Permits()), fence: d.shownFence(l.Fence()), holders: fmt.Sprint(t.holders),
		inUse: fmt.Sprintf("%d/%d", t.permits, limit), note: note})
}

// shownFence formats fence as the table shows it: less the run's first fence, so that a run's
// fences are a few digits long and compare as the fences do (a fence below the first, which a
// store with a counter per key can grant on the other key, is negative). d.mu must be held.
func (d *demo) shownFence(fence uint64) string {
	return fmt.Sprint(int64(fence - d.fence0))
}

// lineWidth is the most runes a line of the demo's output has: it fits a 100-column terminal.
const lineWidth = 100

// tableRow is one line of the event table, its cells formatted.
type tableRow struct {
	at, who, what, key, permits, fence, holders, inUse, note string
}

// printRow prints one line of the event table, its note on the same line when it fits within
// lineWidth and on the lines below, indented, when it does not. d.mu must be held, or no other
// goroutine running.
func (d *demo) printRow(r tableRow) {
	line := strings.TrimRight(fmt.Sprintf("%8s  %-*s  %-9s  %-9s  %7s  %10s  %7s  %6s",
		r.at, d.nameWidth, r.who, r.what, r.key, r.permits, r.fence, r.holders, r.inUse), " ")
	if r.note == "" {
		fmt.Fprintln(d.w, line)
		return
	}
	if utf8.RuneCountInString(line)+2+utf8.RuneCountInString(r.note) <= lineWidth {
		fmt.Fprintln(d.w, line+"  "+r.note)
		return
	}
	fmt.Fprintln(d.w, line)
	indent := strings.Repeat(" ", 12)
	for _, l := range wrap(r.note, indent, indent, lineWidth) {
		fmt.Fprintln(d.w, l)
	}
}

// paragraph prints text wrapped to lineWidth. d.mu must be held, or no other goroutine running.
func (d *demo) paragraph(text string) {
	for _, l := range wrap(text, "", "", lineWidth) {
		fmt.Fprintln(d.w, l)
	}
}

// wrap breaks text into lines of at most width runes, prefixes included, at spaces: the first
// line starts with first, the others with rest. A word longer than a line is cut.
func wrap(text, first, rest string, width int) []string {
	var lines []string
	line, prefix := first, first
	for _, word := range strings.Fields(text) {
		for {
			room := width - utf8.RuneCountInString(line)
			if line != prefix {
				room-- // the space before the word
			}
			n := utf8.RuneCountInString(word)
			if n <= room {
				if line != prefix {
					line += " "
				}
				line += word
				break
			}
			if line == prefix { // the word alone does not fit: cut it
				cut := max(room, 1)
				r := []rune(word)
				line += string(r[:cut])
				word = string(r[cut:])
			}
			lines = append(lines, line)
			line, prefix = rest, rest
		}
	}
	if line != prefix || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// problem records a failed check.
func (d *demo) problem(format string, args ...any) {
	d.mu.Lock()
	d.problems = append(d.problems, fmt.Sprintf(format, args...))
	d.mu.Unlock()
}

// note records something worth reporting that is not a failed check.
func (d *demo) note(format string, args ...any) {
	d.mu.Lock()
	d.notes = append(d.notes, fmt.Sprintf(format, args...))
	d.mu.Unlock()
}
