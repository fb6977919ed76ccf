package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/core"
)

// pgFlags are the PostgreSQL flags of run, inspect and elect: -postgres, the database, and where
// the Store's tables are.
type pgFlags struct {
	url            string // -postgres
	schema, prefix string
	listen         string // -pg-listen: the DSN of the listening connection, if not -postgres
}

func (p *pgFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.url, "postgres", "", "PostgreSQL database instead of Redis: a `URL` (postgres://user:password@host:port/db)\n"+
		"or a key=value DSN. The Store creates its tables on first use (see -pg-schema)")
	fs.StringVar(&p.schema, "pg-schema", "public", "PostgreSQL schema of Leasehold's tables and functions (not empty)")
	fs.StringVar(&p.prefix, "pg-prefix", "leasehold_", "prefix of Leasehold's table, function and channel names in PostgreSQL;\n"+
		"clients sharing a key must use the same schema and prefix. Not empty")
	fs.StringVar(&p.listen, "pg-listen", "", "`DSN` of the connection that LISTENs for wakes, when -postgres goes through\n"+
		"a transaction pooler (PgBouncer in transaction mode): one that reaches the database directly")
}

// options returns the Store's options.
func (p *pgFlags) options() []postgres.Option {
	opts := []postgres.Option{postgres.WithSchema(p.schema), postgres.WithTablePrefix(p.prefix)}
	if p.listen != "" {
		opts = append(opts, postgres.WithListenDSN(p.listen))
	}
	return opts
}

// checkNames returns an error if -pg-schema or -pg-prefix is empty, which -redis refuses too.
func (p *pgFlags) checkNames() error {
	switch {
	case p.schema == "":
		return errors.New(`-pg-schema "": must not be empty`)
	case p.prefix == "":
		return errors.New(`-pg-prefix "": must not be empty`)
	}
	return nil
}

// check returns an error naming the first bad flag. It connects to nothing.
func (p *pgFlags) check() error {
	if _, err := pgxpool.ParseConfig(p.url); err != nil {
		return fmt.Errorf("-postgres: %v", err)
	}
	if p.listen != "" {
		if _, err := pgxpool.ParseConfig(p.listen); err != nil {
			return fmt.Errorf("-pg-listen: %v", err)
		}
	}
	if _, err := postgres.SchemaSQL(p.options()...); err != nil {
		return fmt.Errorf("-pg-schema %q, -pg-prefix %q: %v", p.schema, p.prefix, err)
	}
	return nil
}

// connect opens a pool to -postgres, checks within pingTimeout that the database answers, and
// returns a Store over it (which creates its tables if need be) and a func that closes both.
// When the database does not answer, the error says what failed (postgresFailure).
func (p *pgFlags) connect(ctx context.Context) (core.Store, func(), error) {
	cfg, err := pgxpool.ParseConfig(p.url)
	if err != nil {
		return nil, nil, fmt.Errorf("-postgres: %v", err)
	}
	where := fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres %s: %s", where, oneLine(err))
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		ep := endpoint{network: "tcp", addr: where}
		if strings.HasPrefix(cfg.ConnConfig.Host, "/") {
			ep = endpoint{network: "unix", addr: fmt.Sprintf("%s/.s.PGSQL.%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)}
		}
		return nil, nil, postgresFailure(ctx, where, ep, err)
	}
	s, err := postgres.New(ctx, pool, p.options()...)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, func() { s.Close(); pool.Close() }, nil
}
