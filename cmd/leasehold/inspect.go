package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// inspectHelp is the text of `leasehold inspect --help`, before the flags.
const inspectHelp = `Usage: leasehold inspect -redis URL [flags] KEY

Shows who holds KEY: each holder's id, permits, fence and time left by the server's clock,
and the permits in use and free of the key's limit, the one its latest grant was made with
as the store records it (-limit to count against another). It changes nothing. KEY may
come before or after the flags.

With several -redis servers it reads them as Redlock does: a lease shows when a quorum of
them holds it. Servers that do not answer are named on stderr, one line each; a majority
must answer.

Exit status: 0 if the key was read, 1 if Redis could not be read, 2 for bad usage.

Flags:
`

// inspectCommand runs `leasehold inspect args` and returns the exit status.
func inspectCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var r redisFlags
	var limit int
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	r.register(fs)
	fs.IntVar(&limit, "limit", 0, "count free permits against this limit (0: the limit the store records for KEY)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), inspectHelp)
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
	inUse := snap.InUse()
	fmt.Fprintf(stdout, "%s: %d holder(s), %d permit(s) in use", key, len(snap.Leases), inUse)
	switch {
	case limit > 0 && snap.Limit > 0 && snap.Limit != limit:
		fmt.Fprintf(stdout, ", %d free of %d (-limit; the store records limit %d)\n", max(limit-inUse, 0), limit, snap.Limit)
	case limit > 0:
		fmt.Fprintf(stdout, ", %d free of %d\n", max(limit-inUse, 0), limit)
	case snap.Limit > 0:
		fmt.Fprintf(stdout, ", %d free of %d\n", max(snap.Limit-inUse, 0), snap.Limit)
	default:
		fmt.Fprintf(stdout, "; no limit recorded (no grant on it for a week, or ever): -limit N counts the free permits\n")
	}
	if len(snap.Leases) > 0 {
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "holder\tpermits\tfence\tttl")
		for _, l := range snap.Leases {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%v\n", l.Holder, l.Permits, l.Fence, l.TTL.Round(time.Millisecond))
		}
		tw.Flush()
	}
	return exitOK
}
