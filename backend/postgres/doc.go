// Package postgres is a Leasehold store on PostgreSQL (11 or later), through
// github.com/jackc/pgx/v5: leases, the strict FIFO line of waiters, values, Inspect with the line,
// release notifications (core.Notifier), change announcements (core.Watcher) and fence floors
// (core.FenceRaiser), with the same semantics as the Redis and memory stores, so it passes the
// same conformance suite. It is written only from packages core and conformance, as a third
// party's driver would be. On top of what a lock in Redis can give, AcceptFence checks a lease's
// fence inside the caller's own transaction, so the guarded write and the check commit or roll
// back together.
//
// # Operations
//
// Each operation is one statement, a call of a PL/pgSQL function (one round trip, once pgx has
// prepared it): SELECT … FROM leasehold_acquire($1, …). The function first locks the key's row in
// leasehold_keys (SELECT … FOR UPDATE; the row is made when the key is taken into use, and
// deleted once nothing is left in it: see below), so the operations on one key are serial and
// atomic, and those on different keys never wait for each other. Operations take no advisory
// lock and keep no session state: every operation is a transaction of its own, and works through
// PgBouncer in transaction mode.
//
// Time is the database's: clock_timestamp(), read once per operation after the key's lock is
// taken, in microseconds. A lease expires when that time passes its expiry; an expired lease
// frees its permits with no action of its holder. Fences are a bigint per key, each new grant's
// max(last + 1, now in microseconds): they strictly increase and never wrap, and keep increasing
// even if the table were restored from an older backup, as long as the database's clock does not
// move back. A key's row, which holds its last fence, is deleted only once that fence is below
// the clock, so the next grant's fence, at least the clock, is still above it; a fence raised
// above the clock (core.FenceRaiser, by Redlock) keeps the row until the clock passes it.
//
// A lease granted with a lock delay (core.AcquireRequest.LockDelay, kept in its row) that
// expires unreleased keeps its row until its expiry plus the delay, by the same clock: its
// permits count as held for admission, the key's limit, the line's head and the refusals'
// RetryAfter, in the same statements that admit, and Inspect lists it in Snapshot.Delayed; but
// the lease is over (Extend, Release and its holder's own tries do not find it held: the holder
// is refused, or waits in line, until the delay ends). A lease released in time leaves no delay.
// A waiter held up by a delay is told when it ends (RetryAfter) and sends nothing until then. A
// lease without a delay costs nothing more.
//
// A key has one limit at a time, that of its unexpired leases or, with none, of the live places
// in its line: a request with another limit is refused at once with a *core.LimitMismatchError
// by a statement that writes nothing (no place, no row, no NOTIFY). Once nothing holds the key,
// any limit is taken.
//
// A waiter's place in the line is a row of leasehold_waiters. A release (or an expiry found, or a
// waiter leaving) grants free permits to the head of the line in the same transaction, and
// announces each grant with NOTIFY on the channel of the waiter's Store alone, with a payload of
// 32 hex digits (an MD5 of the key and holder) and the grant's fence, so neither keys nor values
// travel in it. Idle waiters send nothing. A woken waiter whose holder id is its own (the
// portable layer's, not WithHolder's) takes the grant from the notice, without a statement: a
// handoff costs one statement, the release. Otherwise its next Acquire takes it.
//
// # The listening connection
//
// Each Store keeps one connection of its own, outside the pool, on which it LISTENs: for its
// waiters' grants and, while it has watches, for changes of the keys it watches. It is made from
// the pool's configuration, or WithListenDSN's; its application_name is "leasehold listener" and
// the Store's id (16 hex digits). On each connection it checks that it hears a notification sent
// through the pool before it trusts itself, so a listening connection that cannot hear the
// pool's grants (another server, or a transaction pooler in between) leaves waiters polling
// rather than waiting for nothing.
// LISTEN needs a session: behind a transaction pooler, give WithListenDSN a DSN that reaches the
// database directly or through a session-mode pool. While the connection is down, waiters and
// watches are not Reliable, and the portable layer polls at its retry interval; the Store
// reconnects (50ms doubling to 2s), and every waiter and watch is woken at each change.
//
// A waiter's place records its Store's listening backend (pid and start time). The line passes
// over a place whose backend is gone — its process died, or its Store closed — or no longer
// carries its Store's application_name (a session-mode pooler kept it after the Store's
// connection closed, or gave it to another client), and a place taken while its Store could
// not listen whose holder has not asked for ten minutes, when it would grant it, so dead
// waiters do not hold up the line for their wait; the key's limit does not count them either. A waiter that gives up leaves
// the line (one more statement, sent in the background; Close waits for those its waiters owe)
// and gives back a grant it has not taken; so does a try that failed or was canceled in flight
// (one that would wait, or one that would not of a holder id drawn for the call, whose caller
// gives back what it may have been granted), and such a try is kept out for a minute should it
// still arrive: it takes no place and no lease. The holder's Release waits for that leave, so
// that it ends a lease the try took before it, and so does the holder's next Acquire on the key
// (bounded by its ctx), so that a late leave takes neither the place that try keeps nor the
// grant the line makes it — under a holder id shared by callers of one Store (WithHolder); a
// leave sent by another Store under the same id is not waited for. The sweep (below)
// removes the places of dead waiters on keys nobody uses any more, which the line never reaches.
//
// # Watching a key
//
// Changes of a key (a new lease, a release, a grant given back) are announced with NOTIFY on one
// channel per prefix, "leasehold_changed", with an MD5 of the key as payload — only while the key
// is watched: Watch marks the key's row for 30 s and the Store renews the mark every 10 s while
// it has watches on it. A key nobody watches costs its operations no NOTIFY (PostgreSQL serializes
// the commits of transactions that notify).
//
// # What is left in the database
//
// A key nobody holds, waits for or watches leaves no row once released, unless its last fence is
// above the database's clock. Each table's rows, and how long each may outlive its use:
//   - keys: one row per key in use (its last fence, its limit, its line's counter). The release
//     or leave that leaves nothing in the key deletes it; else the sweep does, once the key's
//     leases expired, its places ended and its watch lapsed (30 s after the last renewal), and
//     once the clock passed its last fence.
//   - leases: one row per lease, deleted by its release; one that expired, by the key's next
//     operation or the sweep, once its lock delay, if it has one, has ended.
//   - waiters: one row per place in a line, deleted when granted, left, or passed over by the
//     line; one whose wait ended, whose Store's listening session ended, or, taken while its
//     Store could not listen, whose holder has not asked for ten minutes, by the sweep.
//   - left: one row per try given up in flight, for a minute; then by the sweep.
//   - fences: one row per resource ever given to AcceptFence, kept: it is what refuses a stale
//     write. Delete a resource's row (DELETE FROM leasehold_fences WHERE resource = $1) only
//     when no lease's holder will write to it again — with the resource itself, say.
//   - schema: one row (the layout's version and when a Store last swept).
//
// The sweep: every Store tries one every 15 to 45 s, and the one that finds no sweep in the
// last minute runs it, so the database sees about one a minute however many Stores there are,
// and a row that ended is gone within two minutes while any Store runs (a key an operation has
// locked at that moment, or rows past 100 000 of a kind, wait for the next sweep). A sweep is
// statements of at most 1000 rows of each kind (repeated while full, up to 100); each reads the
// waiters table (with pg_stat_get_activity for each place's listening session) and the keys
// table with two index probes per key — the keys in use, not those ever used — and locks only
// the keys whose rows it removes, skipping those an operation holds. A sweep that fails is
// tried again at the Store's next try.
//
// # Tables, functions and privileges
//
// New creates six tables and fourteen functions named with the prefix (default "leasehold_",
// WithTablePrefix) in the schema (default "public", WithSchema), where there are none, in one
// transaction, which first takes a transaction-scoped advisory lock (pg_advisory_xact_lock, on a
// key hashed from the schema and prefix) so that Stores starting together take turns. The tables
// are keys, leases, waiters, left, fences and schema; SchemaSQL returns the SQL. Creating them
// needs CREATE on the schema; afterwards the Store needs SELECT, INSERT, UPDATE and DELETE on the
// tables, EXECUTE on the functions (PostgreSQL grants it to PUBLIC by default) and the right to
// connect for LISTEN. A role that may not create runs with WithoutSetup, after an administrator
// ran SchemaSQL's output. Keys, holders and values are bytea: any bytes, as bind parameters only,
// and keys of any length (they are indexed by their SHA-256).
//
// # Layout versions
//
// The tables and functions are one layout, whose version, LayoutVersion, is the column layout of
// the schema table's one row (SELECT layout FROM leasehold_schema), written when they are
// created. New reads it first, and refuses any other version, older or newer (tables a Leasehold
// of another version made), or a schema table without one: its error names the version found
// and LayoutVersion, and wraps ErrLayoutVersion, and New changes nothing. A Store never upgrades
// tables in place, nor works beside Stores of another layout: to move to another version, stop
// every Store of the old one, then drop its tables and functions (or give the new Stores another
// WithTablePrefix) before starting the new ones. Every change of the tables or functions takes a
// new LayoutVersion.
//
// Every function expects READ COMMITTED, PostgreSQL's default; under a stricter default
// isolation an operation that meets a concurrent one fails with a serialization error, which
// the Store retries twice.
//
// # Errors
//
// Errors start with "postgres: ". A failure to reach the database reads as the sentence the
// leasehold CLI prints for it, and wraps pgx's error: "postgres ADDR unreachable: ...". When New's
// set-up fails and pgx's words do not say why (an EOF, or ctx's end: a server of another kind can
// keep pgx waiting for ever), New probes the address (from 100 ms on while it waits, within its
// ctx and at most a second) and its error then says what is there: "postgres ADDR: not a
// PostgreSQL server: it answers HTTP (...)". Operations probe nothing: the server answered New.
package postgres
