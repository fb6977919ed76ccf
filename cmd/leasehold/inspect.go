package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/primitives"
)

func inspectCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var redisURLs urls
	var limit int
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.Var(&redisURLs, "redis", "Redis URL (repeat for Redlock over several servers)")
	fs.IntVar(&limit, "limit", 1, "the key's limit, for the free count")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: leasehold inspect -redis URL [-limit N] KEY

Shows who holds KEY: each holder's id, permits, fence and time left by the server's clock,
and the permits in use and free. It changes nothing.

Flags:
`)
		fs.PrintDefaults()
	}
	// The key is the one positional argument; flags may come before it.
	var key string
	if n := len(args); n > 0 && len(args[n-1]) > 0 && args[n-1][0] != '-' {
		key, args = args[n-1], args[:n-1]
	}
	if ok, code := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	switch {
	case key == "":
		usageError(stderr, "inspect", "KEY is required")
		return exitUsage
	case len(redisURLs) == 0:
		usageError(stderr, "inspect", "-redis is required")
		return exitUsage
	case limit < 1:
		usageError(stderr, "inspect", fmt.Sprintf("-limit %d: must be at least 1", limit))
		return exitUsage
	}
	store, closeStore, err := connect(ctx, redisURLs)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold inspect: %v\n", err)
		return exitFail
	}
	defer closeStore()
	sem, err := primitives.NewSemaphore(store, key, limit)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold inspect: %v\n", err)
		return exitUsage
	}
	st, err := sem.Inspect(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold inspect: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s: %d holder(s), %d permit(s) in use, %d free of %d\n", key, len(st.Leases), st.InUse, st.Free, st.Limit)
	if len(st.Leases) > 0 {
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "holder\tpermits\tfence\tttl")
		for _, l := range st.Leases {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%v\n", l.Holder, l.Permits, l.Fence, l.TTL.Round(time.Millisecond))
		}
		tw.Flush()
	}
	return exitOK
}
