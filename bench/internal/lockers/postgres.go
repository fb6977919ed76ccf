package lockers

import (
	"context"
	"hash/fnv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"

	"github.com/leasehold/leasehold/bench/internal/wire"
)

// Postgres returns the PostgreSQL libraries of this module: Leasehold's driver, and a plain
// pg_advisory_lock loop as the floor (the least a lock on PostgreSQL can cost; it holds a
// session, so it does not work through a transaction pooler, and a holder's crash frees it only
// when the server sees the connection close).
func Postgres() []Lib {
	return []Lib{
		{
			Name: "leasehold-postgres", Label: "leasehold-postgres",
			Config: "primitives defaults over backend/postgres (pgx pool of 4 per worker); a release grants the lock " +
				"to the next in line in the same transaction and tells its Store by NOTIFY",
			Mutex: leaseholdPostgres(mutex),
			Semaphore: func(url, key string, limit int, c *wire.Counter) (Locker, error) {
				return leaseholdPostgres(semaphore(limit))(url, key, c)
			},
		},
		{
			Name: "advisory", Label: "pg_advisory_lock (floor)", Peer: true,
			Config: "one connection per worker: SELECT pg_advisory_lock(k) / pg_advisory_unlock(k); the server's " +
				"lock manager queues the waiters and wakes the next at once",
			Mutex: advisoryMutex,
		},
	}
}

// leaseholdPostgres makes Lockers of the primitive p over backend/postgres, each with a pool of
// its own.
func leaseholdPostgres(p primitive) func(url, key string, c *wire.Counter) (Locker, error) {
	return func(url, key string, c *wire.Counter) (Locker, error) {
		pool, err := PgxPool(url, c, 4)
		if err != nil {
			return Locker{}, err
		}
		s, err := postgres.New(context.Background(), pool)
		if err != nil {
			pool.Close()
			return Locker{}, err
		}
		return leaseholdLocker(s, key, p, func() { s.Close(); pool.Close() })
	}
}

// PgxConfig returns the configuration of a connection to url whose statements c counts.
func PgxConfig(url string, c *wire.Counter) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.Tracer = wire.Tracer(c)
	return cfg, nil
}

// PgxPool returns a pool of at most conns connections to url whose statements c counts.
func PgxPool(url string, c *wire.Counter, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = wire.Tracer(c)
	cfg.MaxConns = conns
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// PostgresVersion returns the server_version of the server at url.
func PostgresVersion(url string) (string, error) {
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var v string
	err = conn.QueryRow(context.Background(), "SHOW server_version").Scan(&v)
	return v, err
}

func advisoryMutex(url, key string, c *wire.Counter) (Locker, error) {
	cfg, err := PgxConfig(url, c)
	if err != nil {
		return Locker{}, err
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		return Locker{}, err
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	id := int64(h.Sum64())
	var mu sync.Mutex // one statement at a time on the connection
	return Locker{
		Lock: func(ctx context.Context) (func() error, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
				return nil, err
			}
			return func() error {
				mu.Lock()
				defer mu.Unlock()
				_, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", id)
				return err
			}, nil
		},
		Close: func() { conn.Close(context.Background()) },
	}, nil
}
