// Command peerbench measures Leasehold beside the Go lock libraries it means to replace, on
// servers it starts itself, and prints one markdown table.
//
//	cd bench && go run ./cmd/peerbench [-backend redis|postgres] [-duration 3s] [-hold 2s] [-workers 16] [-only a,b] [-scenarios x,y] [-rounds 3] [-floor-profiles dir]
//
// On Redis (the default; redis-server on PATH) it measures redsync, bsm/redislock and valkey-go's
// valkeylock; on PostgreSQL (its server binaries, found as backend/postgres/pgtest finds them) a
// plain pg_advisory_lock loop as the floor. cirello.io/pglock is measured by bench/pglock, a
// module of its own, so that the bench module builds where it cannot be downloaded.
//
// On Redis, -scenarios floor (alone, or beside the others) adds the floor: the uncontended
// lock/unlock pair in this one process, every worker of a library on one shared client, for a
// bare SET NX PX + EVALSHA compare-and-delete pair, bsm/redislock, a minimal fenced lease with
// server time (FCALL), Leasehold over each driver, and Redlock(3) by Leasehold and by redsync,
// with 1 worker and with -workers workers on a key each. It reports pairs/s and the client's and
// the server's CPU µs per pair (getrusage; INFO cpu) as medians over -rounds interleaved rounds,
// each with the median of its per-round ratios to bsm/redislock (to redsync for Redlock), and
// the servers' commands per pair (INFO commandstats). -floor-profiles writes a CPU profile of
// each measured window. With the floor chosen, -only may also name its libraries (setnx,
// redislock, fenced, leasehold-goredis, leasehold-valkey, redsync, leasehold-redlock); it runs
// all of them otherwise:
//
//	cd bench && go run ./cmd/peerbench -scenarios floor -duration 3s -rounds 3
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
