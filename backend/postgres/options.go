package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/core"
)

// Option configures a Store.
type Option func(*options) error

type options struct {
	schema, prefix string
	setup          bool
	listen         *pgx.ConnConfig // nil: the pool's
}

func newOptions(opts []Option) (options, error) {
	o := options{schema: "public", prefix: "leasehold_", setup: true}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

// WithSchema puts the Store's tables and functions in schema (default "public"), which must exist:
// a name of at most 63 bytes without '$' or NUL. PostgreSQL 15 and later let only a schema's owner
// create in public by default: a role without that right names a schema it may create in.
func WithSchema(schema string) Option {
	return func(o *options) error {
		// The name is quoted wherever it is used, but it also appears inside the functions'
		// $$-quoted bodies, which a '$' could end.
		if schema == "" || len(schema) > 63 || strings.ContainsAny(schema, "$\x00") {
			return fmt.Errorf("%w: schema %q: must be 1 to 63 bytes, without '$' or NUL", core.ErrInvalid, schema)
		}
		o.schema = schema
		return nil
	}
}

// WithTablePrefix sets the prefix of the Store's table, function and channel names (default
// "leasehold_"): a lower-case identifier of at most 32 bytes (letters, digits, '_'). Stores
// with different prefixes share nothing.
func WithTablePrefix(prefix string) Option {
	return func(o *options) error {
		if !validPrefix.MatchString(prefix) {
			return fmt.Errorf("%w: table prefix %q: must be a lower-case identifier of at most 32 bytes ([a-z_][a-z0-9_]*)",
				core.ErrInvalid, prefix)
		}
		o.prefix = prefix
		return nil
	}
}

// WithoutSetup makes New create nothing: it only checks that the tables and functions exist at
// LayoutVersion (made by SchemaSQL's output, say, by a role allowed to create them). The Store
// then needs only to read and write its tables and to run its functions.
func WithoutSetup() Option {
	return func(o *options) error {
		o.setup = false
		return nil
	}
}

// WithListenDSN opens the Store's one listening connection (LISTEN for its waiters' wakes and
// its watches) with dsn instead of the pool's configuration. LISTEN needs a session of its own:
// when the pool reaches the database through a transaction pooler (PgBouncer with
// pool_mode=transaction), give a DSN that reaches the database directly, or through a
// session-mode pool. The operations themselves are single statements and work through either.
func WithListenDSN(dsn string) Option {
	return func(o *options) error {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return fmt.Errorf("%w: listen DSN: %v", core.ErrInvalid, err)
		}
		o.listen = cfg
		return nil
	}
}
