package postgres

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sqlFiles holds the schema's SQL: the tables, the functions the operations share (line.sql),
// then one file per operation.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// schemaSQL is the schema's files joined by a blank line, in the order they run: the tables
// first, then each function before the functions that call it.
var schemaSQL = func() string {
	var parts []string
	for _, name := range []string{"tables", "line", "acquire", "extend", "release", "leave", "watch", "inspect", "sweep", "fence"} {
		b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
		if err != nil {
			panic(err)
		}
		parts = append(parts, string(b))
	}
	return strings.Join(parts, "\n")
}()

// LayoutVersion is the version of the tables and functions (the layout) this package's Stores
// read and write. New writes it in the layout's one-row table when it creates them, and refuses
// tables of any other version, older or newer, with an error wrapping ErrLayoutVersion, changing
// nothing. Every change of the layout takes a new number.
const LayoutVersion = 1

// ErrLayoutVersion is wrapped by New's error when the schema and prefix hold tables of another
// layout version than LayoutVersion (a Leasehold of another version made them), or of none. The
// error names both versions. New changed nothing: run a Store of the layout's version, or give
// this one a schema or prefix of its own (WithSchema, WithTablePrefix).
var ErrLayoutVersion = errors.New("tables of another layout version")

// names are the schema-qualified, quoted names of what the Store uses, and the SQL of its calls.
type names struct {
	schema, prefix string
	table          string // the layout's table, quoted
	ddl            string // schemaSQL with the names filled in
	changed        string // the channel of change announcements (core.Watcher)

	acquire, extend, release, leave, watch, inspect, acceptFence, readLayout, sweep string
}

// validPrefix is what WithTablePrefix takes: a lower-case SQL identifier short enough that the
// longest name made from it ("<prefix>accept_fence", a channel "<prefix><16 hex>") fits
// PostgreSQL's 63 bytes.
var validPrefix = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,31}$`)

func newNames(schema, prefix string) names {
	q := func(name string) string { return pgx.Identifier{schema, prefix + name}.Sanitize() }
	n := names{schema: schema, prefix: prefix, table: q("schema"), changed: prefix + "changed"}
	ddl := strings.ReplaceAll(schemaSQL, "@@changed", quoteLiteral(n.changed))
	ddl = strings.ReplaceAll(ddl, "@@layout", strconv.Itoa(LayoutVersion))
	n.ddl = regexp.MustCompile(`@([a-z_]+)`).ReplaceAllStringFunc(ddl, func(m string) string { return q(m[1:]) })
	n.acquire = "SELECT granted, fence, retry, err FROM " + q("acquire") +
		"($1::bytea, $2::bytea, $3::integer, $4::integer, $5::bigint, $6::bigint, $7::bytea, $8::bigint, $9::bigint, " +
		"$10::bigint, $11::text, $12::integer, $13::timestamptz, $14::bigint)"
	n.extend = "SELECT ok, permits, fence, lim, value FROM " + q("extend") + "($1::bytea, $2::bytea, $3::bigint)"
	n.release = "SELECT " + q("release") + "($1::bytea, $2::bytea, $3::bigint)"
	n.leave = "SELECT " + q("leave") + "($1::bytea, $2::bytea, $3::bigint)"
	n.watch = "SELECT " + q("watch") + "($1::bytea, $2::bigint)"
	n.inspect = "SELECT kind, lim, holder, permits, fence, ttl, value FROM " + q("inspect") + "($1::bytea)"
	n.acceptFence = "SELECT accepted, highest FROM " + q("accept_fence") + "($1::bytea, $2::bigint)"
	n.readLayout = "SELECT layout FROM " + n.table
	n.sweep = "SELECT ran, keys, places, tries FROM " + q("sweep") + "($1::bigint, $2::integer)"
	return n
}

// quoteLiteral returns s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// SchemaSQL returns the SQL that New runs to create the tables and functions of a Store with
// opts (only WithSchema and WithTablePrefix matter) and record their LayoutVersion, for a
// database administrator who creates them ahead of time for a Store made WithoutSetup. It is one
// transaction, which installs them where there are none: run over tables of any version, it
// fails and changes nothing.
func SchemaSQL(opts ...Option) (string, error) {
	o, err := newOptions(opts)
	if err != nil {
		return "", err
	}
	return "BEGIN;\n" + newNames(o.schema, o.prefix).ddl + "COMMIT;\n", nil
}

// setup makes sure the tables and functions of n exist at LayoutVersion. When they do it costs
// one query. Where there are none it creates them (unless create is false) in one transaction
// that first takes a transaction-scoped advisory lock on the schema and prefix, so that Stores
// starting together take turns (CREATE TABLE is not atomic against a concurrent creator). Tables
// of another layout version it refuses, with ErrLayoutVersion, and changes nothing. A database it
// cannot reach (no answer, or not as PostgreSQL) fails it at once, with what it was doing.
func setup(ctx context.Context, pool *pgxpool.Pool, n names, create bool) error {
	var made error // the last try to create the tables
	for attempt := 0; ; attempt++ {
		found, ok, err := readLayout(ctx, pool, n)
		var pe *pgconn.PgError
		switch {
		case err != nil && !errors.As(err, &pe):
			cc := pool.Config().ConnConfig
			return fmt.Errorf("reach the database at %s to read the layout version of schema %q prefix %q: %w",
				net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), n.schema, n.prefix, err)
		case err != nil:
			return fmt.Errorf("read the layout version of schema %q prefix %q: %w", n.schema, n.prefix, err)
		case ok && found == LayoutVersion:
			return nil
		case ok:
			return fmt.Errorf("%w: schema %q prefix %q holds layout %s; this Store reads layout version %d only",
				ErrLayoutVersion, n.schema, n.prefix, describeLayout(found), LayoutVersion)
		case !create:
			return fmt.Errorf("schema %q prefix %q not set up (run postgres.SchemaSQL's output, or drop WithoutSetup): no table %s",
				n.schema, n.prefix, n.table)
		case made != nil && (attempt == 5 || !retryable(made)):
			return fmt.Errorf("create tables in schema %q with prefix %q: %w", n.schema, n.prefix, made)
		case made != nil:
			select {
			case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("create tables in schema %q with prefix %q: %w", n.schema, n.prefix, made)
			}
		case attempt > 0:
			return fmt.Errorf("create tables in schema %q with prefix %q: no table %s once made", n.schema, n.prefix, n.table)
		}
		made = createSchema(ctx, pool, n)
	}
}

// readLayout returns the layout version recorded in n's layout table, and ok false when there is
// no such table. A table without a version (empty, or of a layout before they were numbered)
// reads as version -1.
func readLayout(ctx context.Context, pool *pgxpool.Pool, n names) (found int, ok bool, err error) {
	err = pool.QueryRow(ctx, n.readLayout).Scan(&found)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return found, true, nil
	case errors.Is(err, pgx.ErrNoRows):
		return -1, true, nil
	case errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
		return 0, false, nil
	case errors.As(err, &pe) && pe.Code == "42703": // undefined_column: no layout column
		return -1, true, nil
	}
	return 0, false, err
}

// describeLayout names a layout version read by readLayout.
func describeLayout(v int) string {
	if v < 0 {
		return "without a version number"
	}
	return "version " + strconv.Itoa(v)
}

// createSchema installs n's tables and functions in one transaction, unless its layout table
// appeared while it waited for its turn: setup then reads its version again.
func createSchema(ctx context.Context, pool *pgxpool.Pool, n names) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		lock := sha256.Sum256([]byte("leasehold setup\x00" + n.schema + "\x00" + n.prefix))
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(binary.BigEndian.Uint64(lock[:8]))); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", n.table).Scan(&exists); err != nil || exists {
			return err
		}
		_, err := tx.Exec(ctx, n.ddl)
		return err
	})
}

// retryable reports whether err is one PostgreSQL may return to transactions that run into each
// other (a serialization failure, a deadlock, or concurrent DDL), after which trying again is
// safe: the transaction was rolled back.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "40001", "40P01", "23505", "42P07", "42710", "XX000":
		return true
	}
	return false
}
