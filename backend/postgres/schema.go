package postgres

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
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

// names are the schema-qualified, quoted names of what the Store uses, and the SQL of its calls.
type names struct {
	schema, prefix string
	ddl            string // schemaSQL with the names filled in
	version        string // sha256 of ddl: the functions' version
	changed        string // the channel of change announcements (core.Watcher)

	acquire, extend, release, leave, watch, inspect, acceptFence, readVersion, sweep string
}

// validPrefix is what WithTablePrefix takes: a lower-case SQL identifier short enough that the
// longest name made from it ("<prefix>accept_fence", a channel "<prefix>f<16 hex>") fits
// PostgreSQL's 63 bytes.
var validPrefix = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,31}$`)

func newNames(schema, prefix string) names { return namesFrom(schemaSQL, schema, prefix) }

// namesFrom is newNames for the schema file src.
func namesFrom(src, schema, prefix string) names {
	q := func(name string) string { return pgx.Identifier{schema, prefix + name}.Sanitize() }
	n := names{schema: schema, prefix: prefix, changed: prefix + "changed"}
	ddl := strings.ReplaceAll(src, "@@changed", quoteLiteral(n.changed))
	ddl = regexp.MustCompile(`@([a-z_]+)`).ReplaceAllStringFunc(ddl, func(m string) string { return q(m[1:]) })
	n.ddl = ddl
	sum := sha256.Sum256([]byte(ddl))
	n.version = hex.EncodeToString(sum[:])
	n.acquire = "SELECT granted, fence, retry, err FROM " + q("acquire") +
		"($1::bytea, $2::bytea, $3::integer, $4::integer, $5::bigint, $6::bigint, $7::bytea, $8::bigint, $9::bigint, " +
		"$10::bigint, $11::text, $12::integer, $13::timestamptz, $14::bigint)"
	n.extend = "SELECT ok, permits, fence, lim, value FROM " + q("extend") + "($1::bytea, $2::bytea, $3::bigint)"
	n.release = "SELECT " + q("release") + "($1::bytea, $2::bytea, $3::bigint)"
	n.leave = "SELECT " + q("leave") + "($1::bytea, $2::bytea, $3::bigint)"
	n.watch = "SELECT " + q("watch") + "($1::bytea, $2::bigint)"
	n.inspect = "SELECT kind, lim, holder, permits, fence, ttl, value FROM " + q("inspect") + "($1::bytea)"
	n.acceptFence = "SELECT accepted, highest FROM " + q("accept_fence") + "($1::bytea, $2::bigint)"
	n.readVersion = "SELECT version FROM " + q("schema")
	n.sweep = "SELECT ran, keys, places, tries FROM " + q("sweep") + "(" + quoteLiteral(n.version) + ", $1::bigint, $2::integer)"
	return n
}

// quoteLiteral returns s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// SchemaSQL returns the SQL that New runs to create the tables and functions of a Store with
// opts (only WithSchema and WithTablePrefix matter), for a database administrator who creates
// them ahead of time for a Store made WithoutSetup. It is idempotent.
func SchemaSQL(opts ...Option) (string, error) {
	o, err := newOptions(opts)
	if err != nil {
		return "", err
	}
	n := newNames(o.schema, o.prefix)
	return n.ddl + "\n" + n.recordVersion() + ";\n", nil
}

func (n names) recordVersion() string {
	t := pgx.Identifier{n.schema, n.prefix + "schema"}.Sanitize()
	return "DELETE FROM " + t + "; INSERT INTO " + t + " (version) VALUES (" + quoteLiteral(n.version) + ")"
}

// setup makes sure the tables and functions of n exist at this version. When the version row
// says so already it costs one query; otherwise it runs the DDL in one transaction that first
// takes a transaction-scoped advisory lock on the schema and prefix and locks the version
// table, so that Stores starting together take turns (CREATE ... IF NOT EXISTS is not atomic
// against a concurrent creator). With create false it only checks. A database it cannot reach
// (no answer, or not as PostgreSQL) fails it at once, with what it was doing.
func setup(ctx context.Context, pool *pgxpool.Pool, n names, create bool) error {
	var v string
	err := pool.QueryRow(ctx, n.readVersion).Scan(&v)
	if err == nil && v == n.version {
		return nil
	}
	var pe *pgconn.PgError
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && !errors.As(err, &pe) {
		cc := pool.Config().ConnConfig
		return fmt.Errorf("reach the database at %s to read the version of schema %q prefix %q: %w",
			net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), n.schema, n.prefix, err)
	}
	if !create {
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("tables of version %.12s, want %.12s", v, n.version)
		}
		return fmt.Errorf("schema %q prefix %q not set up (run postgres.SchemaSQL's output, or drop WithoutSetup): %w",
			n.schema, n.prefix, err)
	}
	for attempt := 0; ; attempt++ {
		err = createSchema(ctx, pool, n)
		if err == nil || attempt == 4 || !retryable(err) {
			break
		}
		select {
		case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("create tables in schema %q with prefix %q: %w", n.schema, n.prefix, err)
		}
	}
	if err != nil {
		return fmt.Errorf("create tables in schema %q with prefix %q: %w", n.schema, n.prefix, err)
	}
	return nil
}

func createSchema(ctx context.Context, pool *pgxpool.Pool, n names) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Setups of one schema and prefix take turns from the start: CREATE TABLE IF NOT
		// EXISTS is not atomic against a concurrent creator, which would fail this one.
		lock := sha256.Sum256([]byte("leasehold setup\x00" + n.schema + "\x00" + n.prefix))
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(binary.BigEndian.Uint64(lock[:8]))); err != nil {
			return err
		}
		t := pgx.Identifier{n.schema, n.prefix + "schema"}.Sanitize()
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+t+" (version text NOT NULL)"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+t+" IN EXCLUSIVE MODE"); err != nil {
			return err
		}
		var v string
		err := tx.QueryRow(ctx, n.readVersion).Scan(&v)
		if err == nil && v == n.version {
			return nil // another Store made it while this one waited
		}
		if _, err := tx.Exec(ctx, n.ddl); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, n.recordVersion())
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
