// Command pglock measures Leasehold on PostgreSQL beside cirello.io/pglock, with a plain
// pg_advisory_lock loop as the floor: peerbench's scenarios and table (bench/internal/peerbench).
//
//	cd bench/pglock && go run . [-duration 3s] [-hold 2s] [-workers 16] [-only a,b] [-scenarios x,y]
//
// It is a module of its own so that the bench module builds where cirello.io/pglock cannot be
// downloaded (a module proxy that does not serve it): on such a machine, bring its source (git
// clone https://github.com/cirello-io/pglock) and point the module at it with `go mod edit
// -replace cirello.io/pglock=/path/to/pglock`, without committing that line.
package main

import (
	"context"
	"fmt"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/bench/internal/lockers"
	"github.com/leasehold/leasehold/bench/internal/peerbench"
	"github.com/leasehold/leasehold/bench/internal/wire"
)

func main() {
	b := peerbench.Postgres(
		pglockLib("pglock", "cirello.io/pglock (README)", 3*time.Second, time.Second),
		pglockLib("pglock-fast", "cirello.io/pglock (tuned)", 500*time.Millisecond, 100*time.Millisecond),
	)
	b.Command = "cd bench/pglock && go run ."
	peerbench.Main(b)
}

// pglockLib is cirello.io/pglock with a lease and a heartbeat period: a waiter that finds the
// lock taken tries again after a whole lease.
func pglockLib(name, label string, lease, heartbeat time.Duration) lockers.Lib {
	return lockers.Lib{
		Name: name, Label: label, Peer: true,
		Config: fmt.Sprintf("WithLeaseDuration(%v), WithHeartbeatFrequency(%v) (the README's example: 3s, 1s); database/sql over pgx's stdlib, "+
			"one *sql.DB of at most 4 connections per worker; a waiter tries again after a whole lease", lease, heartbeat),
		Mutex: func(url, key string, c *wire.Counter) (lockers.Locker, error) {
			cfg, err := lockers.PgxConfig(url, c)
			if err != nil {
				return lockers.Locker{}, err
			}
			db := stdlib.OpenDB(*cfg)
			db.SetMaxOpenConns(4)
			client, err := pglock.UnsafeNew(db, pglock.WithLeaseDuration(lease), pglock.WithHeartbeatFrequency(heartbeat))
			if err != nil {
				db.Close()
				return lockers.Locker{}, err
			}
			if err := client.TryCreateTable(); err != nil {
				db.Close()
				return lockers.Locker{}, err
			}
			return lockers.Locker{
				Lock: func(ctx context.Context) (func() error, error) {
					l, err := client.AcquireContext(ctx, key)
					if err != nil {
						return nil, err
					}
					return func() error { return client.Release(l) }, nil
				},
				Close: func() { db.Close() },
			}, nil
		},
	}
}
