-- Leasehold's PostgreSQL schema. @ stands for the schema-qualified table prefix (by default
-- "public"."leasehold_"); comments never use it, since a schema's name may hold a line break,
-- which would end the comment and run the rest of the name. The files are one install, run once
-- in one transaction where none of the tables are (see setup in schema.go); it writes the
-- layout's version (LayoutVersion), which every change of the files raises.
--
-- Times are microseconds since the Unix epoch by the database's clock_timestamp(); durations are
-- microseconds. Keys and holders are any bytes (bytea), looked up by their SHA-256 so that a key
-- of any length fits a btree index. Every mutating operation first locks the key's row in the
-- keys table (FOR UPDATE), so the operations on one key are serial; it reads the clock only
-- after that, so the store's time never runs backwards along that order.
--
-- A key's row exists only while the key is in use: it is made by the first operation that needs
-- it and deleted (forget) by the release, leave or sweep that finds nothing left in it. Deleting
-- it ends the serial order of the key's operations only for those that find no row: an
-- operation waiting for the lock of a row that is deleted finds no row, and makes it again
-- (lockkey), which the primary key lets only one transaction do. A row is deleted only when the
-- key's last fence is below the clock, so a grant on the row made again, whose fence is at least
-- the clock, still gets a higher fence.
--
-- A lease granted with a lock delay that expires unreleased keeps its row until its expiry plus
-- its delay: until then its permits count as held (for admission, the key's limit, the line and
-- the refusals' retry), but the lease is not held: extend and release do not find it, and its
-- holder's requests are refused (or wait in line) until the delay ends. Every purge of expired
-- leases keeps such a row, and so keeps the key's row.
--
-- The functions a Store calls run with sequential and bitmap scans off. PL/pgSQL caches its
-- plans per session, and a plan made while a table was small (new, or just vacuumed) scans the
-- whole table: every later call would read every lease of every key, and the dead rows that
-- the churn of leases leaves until autovacuum comes. Index scans read one key's rows, and skip
-- the dead ones once seen.

-- One row: the layout's version (LayoutVersion), and when a Store last swept.
CREATE TABLE @schema (
    layout integer NOT NULL,
    swept  bigint NOT NULL DEFAULT 0
);

CREATE TABLE @keys (
    kh            bytea PRIMARY KEY,          -- sha256(key)
    key           bytea NOT NULL,
    fence         bigint NOT NULL DEFAULT 0,  -- the last fence granted on the key
    lim           integer NOT NULL DEFAULT 0, -- the key's limit: that of its latest grant
    seq           bigint NOT NULL DEFAULT 0,  -- the line's counter
    watched_until bigint NOT NULL DEFAULT 0   -- while now < this, changes are announced
);

CREATE TABLE @leases (
    kh      bytea NOT NULL,
    hh      bytea NOT NULL,                   -- sha256(holder)
    holder  bytea NOT NULL,
    permits integer NOT NULL,
    fence   bigint NOT NULL,
    expires bigint NOT NULL,
    untaken boolean NOT NULL,                 -- granted by the line, not yet taken by its holder
    value   bytea NOT NULL,
    delay   bigint NOT NULL,                  -- its lock delay (see the top of this file)
    PRIMARY KEY (kh, hh)
);

CREATE TABLE @waiters (
    kh       bytea NOT NULL,
    seq      bigint NOT NULL,                 -- place in the line
    hh       bytea NOT NULL,
    holder   bytea NOT NULL,
    permits  integer NOT NULL,
    lim      integer NOT NULL,
    ttl      bigint NOT NULL,
    floor    bigint NOT NULL,                 -- least fence of its grant (core.FenceRaiser)
    deadline bigint NOT NULL,                 -- the end of its wait
    value    bytea NOT NULL,
    try      bigint,                          -- the try that took or last kept the place
    channel  text,                            -- where its Store hears of its grant
    pid      integer,                         -- that Store's listening backend, to tell it died
    started  timestamptz,
    tried    bigint NOT NULL,                 -- when its holder last asked (a place without pid polls: see live)
    delay    bigint NOT NULL,                 -- the lock delay of the grant it asks for
    PRIMARY KEY (kh, seq),
    UNIQUE (kh, hh)
);

-- Tries given up in flight, so that one arriving late takes no place in the line.
CREATE TABLE @left (
    kh      bytea NOT NULL,
    hh      bytea NOT NULL,
    try     bigint NOT NULL,
    expires bigint NOT NULL,
    PRIMARY KEY (kh, hh, try)
);

-- The highest fence accepted per resource by Store.AcceptFence.
CREATE TABLE @fences (
    rh       bytea PRIMARY KEY,               -- sha256(resource)
    resource bytea NOT NULL,
    fence    bigint NOT NULL
);

INSERT INTO @schema (layout) VALUES (@@layout);
