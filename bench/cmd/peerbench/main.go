// Command peerbench measures Leasehold beside the Go lock libraries it means to replace, on
// servers it starts itself, and prints one markdown table.
//
//	cd bench && go run ./cmd/peerbench [-backend redis|postgres] [-duration 3s] [-hold 2s] [-workers 16] [-only a,b] [-scenarios x,y]
//
// On Redis (the default; redis-server on PATH) it measures redsync, bsm/redislock and valkey-go's
// valkeylock; on PostgreSQL (its server binaries, found as backend/postgres/pgtest finds them) a
// plain pg_advisory_lock loop as the floor. cirello.io/pglock, which the module proxy of this
// project's build machines does not serve, is measured by bench/pglock, a module of its own.
package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/leasehold/leasehold/bench/internal/peerbench"
)

func main() {
	backend := "redis"
	if i := slices.Index(os.Args, "-backend"); i > 0 && i+1 < len(os.Args) {
		backend = os.Args[i+1]
		os.Args = slices.Delete(os.Args, i, i+2)
	}
	switch backend {
	case "redis":
		peerbench.Main(peerbench.Redis())
	case "postgres":
		peerbench.Main(peerbench.Postgres())
	default:
		fmt.Fprintf(os.Stderr, "peerbench: -backend %q: must be redis or postgres\n", backend)
		os.Exit(2)
	}
}
