package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/core"
)

// inspectHelp is the text of `leasehold inspect --help`, before the flags.
const inspectHelp = `Usage: leasehold inspect -redis URL|-postgres URL [flags] KEY

Shows who holds KEY: each holder's id, permits, fence, time left by the server's clock and
value (what the holder said of itself: leasehold run's -value, by default its host, pid and
command; elect's VALUE), and the permits in use and free of the key's limit: that of its
leases and waiters, which every request must use while anyone holds or waits for the key
(leasehold run with another -limit exits 78). When nobody holds or waits for it, the next
request's limit becomes the key's; -limit N then counts the free permits of N. Then
the line of waiters, first served first: position, holder, permits and value, or "no one
waiting". Values are quoted as Go strings (a newline shows as \n) and, in the tables, cut
with "…" to keep each line within 100 columns. It changes nothing. KEY may come before or
after the flags.

With several -redis servers it reads them as Redlock does: a lease shows when a quorum of
them holds it; Redlock keeps no line of waiters. Servers that do not answer are named on
stderr, one line each; a majority must answer.

Exit status: 0 if the key was read; 1 if the store could not be read (the line on stderr
says why: unreachable, authentication failed, TLS failed, not a Redis or PostgreSQL server,
no such database); 2 for bad usage.

Flags:
`

// inspectCommand runs `leasehold inspect args` and returns the exit status.
func inspectCommand(ctx context.Context, args []string, stdout, stderr io.Writer, backends []Backend) int {
	var r storeFlags
	var limit int
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	r.register(fs, backends)
	fs.IntVar(&limit, "limit", 0, "count free permits against this limit when nobody holds KEY; while someone does,\n"+
		"they count against the key's limit, and a -limit that differs is reported")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), r.help(inspectHelp))
		fs.PrintDefaults()
	}
	keys, ok, code := parseInterleaved(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	var err error
	switch {
	case len(keys) == 0:
		err = fmt.Errorf("KEY is required")
	case len(keys) > 1:
		err = fmt.Errorf("unexpected argument %q: one KEY only", keys[1])
	case keys[0] == "":
		err = fmt.Errorf("KEY must not be empty")
	case limit < 0:
		err = fmt.Errorf("-limit %d: must not be negative", limit)
	default:
		err = r.check()
	}
	if err != nil {
		usageError(stderr, "inspect", err.Error())
		return exitUsage
	}
	key := keys[0]
	store, closeStore, err := r.connect(ctx, "inspect", stderr, 1)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold inspect: %v\n", err)
		return exitFail
	}
	defer closeStore()
	snap, err := store.Inspect(ctx, key)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold inspect: %q: %v\n", key, err)
		return exitFail
	}
	printHeader(stdout, key, snap, limit)
	printLeases(stdout, snap.Leases)
	printDelayed(stdout, snap.Delayed, time.Now())
	if len(r.urls) > 1 {
		fmt.Fprintln(stdout, "no line of waiters over Redlock (several -redis servers)")
		return exitOK
	}
	printWaiters(stdout, snap.Waiters)
	return exitOK
}

// printHeader prints inspect's first line: key's holders and permits in use, then its free
// permits of the key's limit while someone holds or waits for it (noting a -limit that differs,
// which a request would be refused for), else of -limit, else that nobody holds it.
func printHeader(w io.Writer, key string, snap core.Snapshot, limit int) {
	inUse := snap.InUse() + snap.Closed() // a lock delay's permits are not free either
	held := len(snap.Leases) > 0 || len(snap.Waiters) > 0 || len(snap.Delayed) > 0
	fmt.Fprintf(w, "%s: %d holder(s), %d permit(s) in use", plainOrQuoted(key), len(snap.Leases), snap.InUse())
	if c := snap.Closed(); c > 0 {
		fmt.Fprintf(w, ", %d closed by a lock delay", c)
	}
	switch {
	case held && snap.Limit > 0 && limit > 0 && limit != snap.Limit:
		fmt.Fprintf(w, ", %d free of %d (limit %d; -limit %d is refused)\n", max(snap.Limit-inUse, 0), snap.Limit, snap.Limit, limit)
	case held && snap.Limit > 0:
		fmt.Fprintf(w, ", %d free of %d\n", max(snap.Limit-inUse, 0), snap.Limit)
	case limit > 0:
		fmt.Fprintf(w, ", %d free of %d\n", max(limit-inUse, 0), limit)
	case held:
		fmt.Fprintf(w, "; the store reports no limit: -limit N counts the free permits\n")
	default:
		fmt.Fprintf(w, "; no limit: nobody holds or waits for it\n")
	}
}

// tableWidth is the most runes a line of inspect's tables has: they fit a 100-column terminal.
const tableWidth = 100

// printLeases prints a table of leases, nothing when there are none.
func printLeases(w io.Writer, leases []core.LeaseInfo) {
	if len(leases) == 0 {
		return
	}
	rows := [][]string{{"holder", "permits", "fence", "ttl", "value"}}
	values := make([]string, len(leases))
	for i, l := range leases {
		rows = append(rows, []string{plainOrQuoted(l.Holder), fmt.Sprint(l.Permits), fmt.Sprint(l.Fence), fmt.Sprint(l.TTL.Round(time.Millisecond))})
		values[i] = l.Value
	}
	printTable(w, rows, values)
}

// printDelayed prints the leases that expired unreleased and whose lock delay keeps their permits
// closed, each with when (by this machine's clock, from the store's time left) it opens.
func printDelayed(w io.Writer, delayed []core.DelayInfo, now time.Time) {
	if len(delayed) == 0 {
		return
	}
	fmt.Fprintf(w, "closed by a lock delay (leases that expired unreleased):\n")
	rows := [][]string{{"holder", "permits", "fence", "opens in", "opens at"}}
	values := make([]string, len(delayed))
	for i, d := range delayed {
		rows = append(rows, []string{plainOrQuoted(d.Holder), fmt.Sprint(d.Permits), fmt.Sprint(d.Fence), fmt.Sprint(d.Left.Round(time.Millisecond))})
		values[i] = now.Add(d.Left).UTC().Format("15:04:05.000Z")
	}
	printTable(w, rows, values)
}

// printWaiters prints the line of waiters, head first, or that no one waits.
func printWaiters(w io.Writer, waiters []core.WaiterInfo) {
	if len(waiters) == 0 {
		fmt.Fprintln(w, "no one waiting")
		return
	}
	fmt.Fprintf(w, "%d waiting, first served first:\n", len(waiters))
	rows := [][]string{{"#", "holder", "permits", "value"}}
	values := make([]string, len(waiters))
	for i, wt := range waiters {
		rows = append(rows, []string{fmt.Sprint(i + 1), plainOrQuoted(wt.Holder), fmt.Sprint(wt.Permits)})
		values[i] = wt.Value
	}
	printTable(w, rows, values)
}

// printTable prints rows in columns two spaces apart: rows[0] is the header, whose last cell
// names the values column; values[i] is the value of rows[i+1], quoted and cut to what is left
// of tableWidth (at least 16 runes).
func printTable(w io.Writer, rows [][]string, values []string) {
	cols := len(rows[0]) - 1
	widths := make([]int, cols)
	for _, row := range rows {
		for c := range cols {
			widths[c] = max(widths[c], utf8.RuneCountInString(row[c]))
		}
	}
	room := tableWidth
	for _, wd := range widths {
		room -= wd + 2
	}
	room = max(room, 16)
	for i, row := range rows {
		var b strings.Builder
		for c := range cols {
			b.WriteString(row[c])
			b.WriteString(strings.Repeat(" ", widths[c]-utf8.RuneCountInString(row[c])+2))
		}
		if i == 0 {
			b.WriteString(row[cols])
		} else {
			b.WriteString(quoteValue(values[i-1], room))
		}
		fmt.Fprintln(w, b.String())
	}
}
