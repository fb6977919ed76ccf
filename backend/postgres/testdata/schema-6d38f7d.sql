-- Leasehold's PostgreSQL schema. @ stands for the schema-qualified table prefix (by default
-- "public"."leasehold_"); comments never use it, since a schema's name may hold a line break,
-- which would end the comment and run the rest of the name. Every statement is idempotent: the
-- Store runs this file when the schema's version row is missing or of another version.
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
-- The functions a Store calls run with sequential and bitmap scans off. PL/pgSQL caches its
-- plans per session, and a plan made while a table was small (new, or just vacuumed) scans the
-- whole table: every later call would read every lease of every key, and the dead rows that
-- the churn of leases leaves until autovacuum comes. Index scans read one key's rows, and skip
-- the dead ones once seen.

-- The version of this file the functions were made from, and when a Store last swept.
CREATE TABLE IF NOT EXISTS @schema (
    version text NOT NULL
);
ALTER TABLE @schema ADD COLUMN IF NOT EXISTS swept bigint NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS @keys (
    kh            bytea PRIMARY KEY,          -- sha256(key)
    key           bytea NOT NULL,
    fence         bigint NOT NULL DEFAULT 0,  -- the last fence granted on the key
    lim           integer NOT NULL DEFAULT 0, -- the key's limit: that of its latest grant
    seq           bigint NOT NULL DEFAULT 0,  -- the line's counter
    watched_until bigint NOT NULL DEFAULT 0   -- while now < this, changes are announced
);

CREATE TABLE IF NOT EXISTS @leases (
    kh      bytea NOT NULL,
    hh      bytea NOT NULL,                   -- sha256(holder)
    holder  bytea NOT NULL,
    permits integer NOT NULL,
    fence   bigint NOT NULL,
    expires bigint NOT NULL,
    untaken boolean NOT NULL,                 -- granted by the line, not yet taken by its holder
    value   bytea NOT NULL,
    PRIMARY KEY (kh, hh)
);

CREATE TABLE IF NOT EXISTS @waiters (
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
    PRIMARY KEY (kh, seq),
    UNIQUE (kh, hh)
);
-- When the place's holder last asked (a waiter without pid polls: see live); for a place taken
-- before the column was made, when it was made, and by an earlier version's functions, when
-- it was taken.
ALTER TABLE @waiters ADD COLUMN IF NOT EXISTS tried bigint NOT NULL
    DEFAULT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;

-- Tries given up in flight, so that one arriving late takes no place in the line.
CREATE TABLE IF NOT EXISTS @left (
    kh      bytea NOT NULL,
    hh      bytea NOT NULL,
    try     bigint NOT NULL,
    expires bigint NOT NULL,
    PRIMARY KEY (kh, hh, try)
);

-- The highest fence accepted per resource by Store.AcceptFence.
CREATE TABLE IF NOT EXISTS @fences (
    rh       bytea PRIMARY KEY,               -- sha256(resource)
    resource bytea NOT NULL,
    fence    bigint NOT NULL
);

-- lockkey locks key's row, creating it if need be, and returns it. A row another transaction
-- deletes while this one waits for its lock is made again.
CREATE OR REPLACE FUNCTION @lockkey(p_kh bytea, p_key bytea) RETURNS @keys LANGUAGE plpgsql AS $$
DECLARE
    k @keys;
BEGIN
    LOOP
        INSERT INTO @keys (kh, key) VALUES (p_kh, p_key) ON CONFLICT (kh) DO NOTHING RETURNING * INTO k;
        EXIT WHEN FOUND; -- made, so locked, by this transaction
        SELECT * INTO k FROM @keys WHERE kh = p_kh FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;
    RETURN k;
END
$$;

-- alive reports whether the listening backend pid that started at started, of the Store that
-- LISTENs on channel, still serves that Store: it runs, and its application_name is the Store's
-- listener's ("leasehold listener " and the channel's last 16 characters, the Store's id; an
-- earlier version's listeners named no id), maybe with more after it (PgBouncer's
-- application_name_add_host appends " - host:port"). A pooler in session mode keeps a server
-- session after its client's connection closed, and gives it to its next client: the session
-- reset (DISCARD ALL), or the next client, renames it. A start or name the caller may not see
-- (another role's backend) counts as alive.
--
-- It and live are PL/pgSQL, whose plans a session keeps: a function in SQL is parsed and planned
-- again at each transaction that calls it, which cost a grant more than the rest of its work.
CREATE OR REPLACE FUNCTION @alive(p_pid integer, p_started timestamptz, p_channel text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pg_stat_get_activity(p_pid) a
                   WHERE a.pid = p_pid AND (a.backend_start IS NULL OR a.backend_start = p_started)
                     AND coalesce(left(a.application_name, 35) = 'leasehold listener ' || right(p_channel, 16)
                                  OR a.application_name = 'leasehold listener'
                                  OR left(a.application_name, 21) = 'leasehold listener - ', true));
END
$$;

-- live reports whether place w may still take a grant at p_now: its wait has not ended, and its
-- Store's listening backend still runs or, for a place taken while that Store could not listen
-- (its waiter polls), its holder asked within the last ten minutes.
CREATE OR REPLACE FUNCTION @live(w @waiters, p_now bigint) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF w.deadline <= p_now THEN
        RETURN false;
    ELSIF w.pid IS NULL THEN
        RETURN w.tried > p_now - 600000000;
    END IF;
    RETURN @alive(w.pid, w.started, w.channel);
END
$$;

-- held returns the key's limit: its row's while it has an unexpired lease, else that of the
-- first live place in its line, else NULL (nothing holds the key: any limit may have it).
CREATE OR REPLACE FUNCTION @held(k @keys, p_now bigint) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v integer;
BEGIN
    IF EXISTS (SELECT 1 FROM @leases WHERE kh = k.kh AND expires > p_now) THEN
        RETURN k.lim;
    END IF;
    SELECT w.lim INTO v FROM @waiters w WHERE w.kh = k.kh AND @live(w, p_now) ORDER BY w.seq LIMIT 1;
    RETURN v;
END
$$;

-- forget deletes the key's row when nothing is left in it — no lease (the caller purged the
-- expired ones), no place in its line, no watch — and its last fence is below p_now, and
-- reports whether it did. The caller holds the row's lock.
CREATE OR REPLACE FUNCTION @forget(k @keys, p_now bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF k.fence >= p_now OR k.watched_until > p_now OR EXISTS (SELECT 1 FROM @leases WHERE kh = k.kh)
       OR EXISTS (SELECT 1 FROM @waiters WHERE kh = k.kh) THEN
        RETURN false;
    END IF;
    DELETE FROM @keys WHERE kh = k.kh;
    RETURN true;
END
$$;

-- serve grants free permits to the key's line, strictly in order: it stops at the first waiter
-- whose permits are not free. Places whose wait ended, whose holder holds a lease already, or
-- that can take no grant (see live) are dropped on the way. Each grant is announced on its waiter's
-- channel (with its fence), and to watchers. It returns k as it left it, written back when it granted anything.
-- The caller purged the key's expired leases.
CREATE OR REPLACE FUNCTION @serve(k @keys, p_now bigint) RETURNS @keys LANGUAGE plpgsql AS $$
DECLARE
    p @waiters;
    used bigint;
    holds boolean;
    alive boolean;
    granted boolean := false;
BEGIN
    LOOP
        SELECT * INTO p FROM @waiters WHERE kh = k.kh ORDER BY seq LIMIT 1;
        EXIT WHEN NOT FOUND;
        holds := false;
        IF p.deadline > p_now THEN
            -- One read of the key's leases: the permits they hold (the grants of this loop
            -- included) and whether the place's holder holds one.
            SELECT coalesce(sum(x.permits), 0), coalesce(bool_or(x.hh = p.hh), false) INTO used, holds
            FROM @leases x WHERE x.kh = k.kh;
        END IF;
        IF p.deadline <= p_now OR holds THEN
            DELETE FROM @waiters WHERE kh = k.kh AND seq = p.seq;
            CONTINUE;
        END IF;
        EXIT WHEN used + p.permits > p.lim;
        -- Whether it can take the grant (see live; its wait has not ended).
        IF p.pid IS NULL THEN
            alive := p.tried > p_now - 600000000;
        ELSE
            alive := @alive(p.pid, p.started, p.channel);
        END IF;
        IF NOT alive THEN
            DELETE FROM @waiters WHERE kh = k.kh AND seq = p.seq;
            CONTINUE; -- its Store is gone, or its holder stopped asking: nobody would take the grant
        END IF;
        k.fence := greatest(k.fence + 1, p_now, p.floor);
        k.lim := p.lim;
        WITH placed AS (DELETE FROM @waiters WHERE kh = k.kh AND seq = p.seq)
        INSERT INTO @leases (kh, hh, holder, permits, fence, expires, untaken, value)
        VALUES (k.kh, p.hh, p.holder, p.permits, k.fence, p_now + p.ttl, true, p.value);
        used := used + p.permits;
        granted := true;
        IF p.channel IS NOT NULL THEN
            -- The notice, and for a Store whose channel's id follows an 'f' the grant's fence,
            -- which its waiter takes without asking again (an earlier version's Stores, whose
            -- ids follow a 'w', read the notice alone).
            PERFORM pg_notify(p.channel, md5(int4send(length(k.key)) || k.key || p.holder)
                || CASE WHEN substr(p.channel, length(p.channel) - 16, 1) = 'f' THEN ' ' || k.fence ELSE '' END);
        END IF;
        -- Every permit taken: no live place, all of this limit, fits (a Mutex's line stops here).
        EXIT WHEN used >= p.lim;
    END LOOP;
    IF granted THEN
        UPDATE @keys SET fence = k.fence, lim = k.lim WHERE kh = k.kh;
        IF k.watched_until > p_now THEN
            PERFORM pg_notify(@@changed, md5(k.key));
        END IF;
    END IF;
    RETURN k;
END
$$;

-- acquire is core.Store.Acquire, and core.FenceRaiser's methods: a new grant's fence is at least
-- p_floor, and a lease the holder holds is raised to p_raise. When p_lim is not the key's limit
-- (held) it sets err to 'limit ' and the key's limit, and changes nothing. When the holder holds
-- another number of permits it sets err and changes nothing but what serving the line would have.
-- A refusal reports in fence the key's last fence (later grants are above it). p_try names a
-- try that will wait: one its caller gave up on (see leave) is refused and takes no place.
CREATE OR REPLACE FUNCTION @acquire(
    p_key bytea, p_holder bytea, p_permits integer, p_lim integer, p_ttl bigint, p_wait bigint,
    p_value bytea, p_floor bigint, p_raise bigint, p_try bigint, p_channel text, p_pid integer,
    p_started timestamptz,
    OUT granted boolean, OUT fence bigint, OUT retry bigint, OUT err text)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    v_hh bytea := sha256(p_holder);
    k @keys;
    l @leases;
    now_ bigint;
    used bigint;
    need bigint;
    waiting boolean;
    holds boolean;
    expired bigint;
    held integer;
    f bigint;
    placed boolean; -- whether the holder has a place in the line; NULL: not known
BEGIN
    granted := false; fence := 0; retry := 0;
    -- The uncontended path: the key is not in use, so it has no row (a release deletes it).
    -- The row made here is locked by this transaction, and has no lease, no line, no watch and
    -- no limit: the lease is granted in one more statement, which also keeps out a try its
    -- caller gave up on. The clock is read after the row is made (see tables.sql).
    INSERT INTO @keys (kh, key) VALUES (v_kh, p_key) ON CONFLICT (kh) DO NOTHING;
    IF FOUND THEN
        now_ := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
        f := greatest(1, now_, p_floor);
        WITH gone AS (DELETE FROM @left x WHERE p_try IS NOT NULL AND x.kh = v_kh AND x.hh = v_hh AND x.try = p_try
                      RETURNING 1),
             made AS (UPDATE @keys x SET fence = f, lim = p_lim WHERE x.kh = v_kh AND NOT EXISTS (SELECT 1 FROM gone))
        INSERT INTO @leases (kh, hh, holder, permits, fence, expires, untaken, value)
        SELECT v_kh, v_hh, p_holder, p_permits, f, now_ + p_ttl, false, p_value
        WHERE NOT EXISTS (SELECT 1 FROM gone);
        IF FOUND THEN
            granted := true; fence := f;
        ELSE
            -- Its caller gave up on it: refused, and nothing kept of the key.
            DELETE FROM @keys WHERE kh = v_kh;
        END IF;
        RETURN;
    END IF;
    SELECT * INTO k FROM @keys WHERE kh = v_kh FOR UPDATE;
    IF NOT FOUND THEN
        k := @lockkey(v_kh, p_key);
    END IF;
    now_ := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    -- Every unexpired lease and live place has the row's limit, and a row of fence 0 (new, or
    -- only watched) has none: only another limit on a used row needs a look.
    IF p_lim <> k.lim AND k.fence <> 0 THEN
        held := @held(k, now_);
        IF held IS NOT NULL THEN
            err := 'limit ' || held;
            RETURN;
        END IF;
    END IF;
    IF p_try IS NOT NULL THEN
        DELETE FROM @left WHERE kh = v_kh AND hh = v_hh AND try = p_try;
        IF FOUND THEN
            PERFORM @forget(k, now_);
            RETURN; -- its caller gave up on it: refused, and no place taken
        END IF;
    END IF;
    -- One read of the key's leases: the permits the unexpired ones hold, whether the holder holds
    -- one, and whether any expired (to be purged, which is rare).
    SELECT coalesce(sum(x.permits) FILTER (WHERE x.expires > now_), 0), count(*) FILTER (WHERE x.expires <= now_),
           bool_or(x.hh = v_hh AND x.expires > now_)
    INTO used, expired, holds FROM @leases x WHERE x.kh = v_kh;
    IF expired > 0 THEN
        DELETE FROM @leases WHERE kh = v_kh AND expires <= now_;
    END IF;
    waiting := EXISTS (SELECT 1 FROM @waiters WHERE kh = v_kh);
    placed := false; -- without a line, no place
    IF waiting THEN
        -- A holder with a place that asks again keeps its place with what it asks now, before
        -- the line is served: a head that now fits is granted at once, not refused on its old
        -- request. (Without a line there is no place to keep: the uncontended path skips this.)
        placed := NULL;
        IF p_wait > 0 THEN
            UPDATE @waiters SET permits = p_permits, lim = p_lim, ttl = p_ttl, floor = p_floor,
                deadline = now_ + p_wait, value = p_value, try = p_try, channel = p_channel,
                pid = p_pid, started = p_started, tried = now_
            WHERE kh = v_kh AND hh = v_hh;
            placed := FOUND;
        END IF;
        -- Serving grants only free permits: with every permit held by unexpired leases, whose
        -- limit every live place has (a busy Mutex, whose waiter joins the line), there is
        -- nothing to serve, and the release that frees one serves the line.
        IF used = 0 OR used < k.lim THEN
            placed := NULL; -- serving may have passed it over
            k := @serve(k, now_);
            waiting := EXISTS (SELECT 1 FROM @waiters WHERE kh = v_kh);
            SELECT coalesce(sum(x.permits), 0), bool_or(x.hh = v_hh) INTO used, holds FROM @leases x WHERE x.kh = v_kh;
        END IF;
    END IF;
    IF holds THEN
        SELECT * INTO l FROM @leases WHERE kh = v_kh AND hh = v_hh;
        IF l.permits <> p_permits THEN
            err := format('holder already holds %s permits, asked for %s', l.permits, p_permits);
            RETURN;
        END IF;
        l.fence := greatest(l.fence, p_raise);
        UPDATE @leases SET expires = now_ + p_ttl, untaken = false, value = p_value, fence = l.fence
        WHERE kh = v_kh AND hh = v_hh;
        IF l.fence > k.fence THEN
            UPDATE @keys SET fence = l.fence WHERE kh = v_kh;
        END IF;
        granted := true; fence := l.fence;
        RETURN;
    END IF;
    IF used + p_permits > p_lim OR waiting THEN
        -- Its place, kept above, unless it had none or serving passed it over.
        IF p_wait > 0 AND placed IS NULL THEN
            placed := EXISTS (SELECT 1 FROM @waiters WHERE kh = v_kh AND hh = v_hh);
        END IF;
        IF p_wait > 0 AND NOT placed THEN
            WITH s AS (UPDATE @keys SET seq = seq + 1 WHERE kh = v_kh RETURNING seq)
            INSERT INTO @waiters (kh, seq, hh, holder, permits, lim, ttl, floor, deadline, value,
                                  try, channel, pid, started, tried)
            SELECT v_kh, s.seq, v_hh, p_holder, p_permits, p_lim, p_ttl, p_floor,
                   now_ + p_wait, p_value, p_try, p_channel, p_pid, p_started, now_
            FROM s;
        END IF;
        -- With room but others ahead, the first expiry is the next change expiry alone brings.
        need := greatest(used + p_permits - p_lim, 1);
        SELECT coalesce(min(e.expires) - now_, 0) INTO retry FROM (
            SELECT expires, sum(permits) OVER (ORDER BY expires, hh) AS freed
            FROM @leases WHERE kh = v_kh) e
        WHERE e.freed >= need;
        fence := k.fence;
        RETURN;
    END IF;
    k.fence := greatest(k.fence + 1, now_, p_floor);
    INSERT INTO @leases (kh, hh, holder, permits, fence, expires, untaken, value)
    VALUES (v_kh, v_hh, p_holder, p_permits, k.fence, now_ + p_ttl, false, p_value);
    UPDATE @keys SET fence = k.fence, lim = p_lim WHERE kh = v_kh;
    IF k.watched_until > now_ THEN
        PERFORM pg_notify(@@changed, md5(k.key));
    END IF;
    granted := true; fence := k.fence;
END
$$;

-- extend is core.Store.Extend: ok is false when the holder holds no unexpired lease.
CREATE OR REPLACE FUNCTION @extend(p_key bytea, p_holder bytea, p_ttl bigint,
    OUT ok boolean, OUT permits integer, OUT fence bigint, OUT lim integer, OUT value bytea)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    k @keys;
    now_ bigint;
BEGIN
    SELECT * INTO k FROM @keys WHERE kh = v_kh FOR UPDATE;
    ok := false;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    now_ := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    UPDATE @leases l SET expires = now_ + p_ttl, untaken = false
    WHERE l.kh = v_kh AND l.hh = sha256(p_holder) AND l.expires > now_
    RETURNING l.permits, l.fence, l.value INTO permits, fence, value;
    ok := permits IS NOT NULL;
    lim := k.lim;
END
$$;

-- release is core.Store.Release: it ends the holder's unexpired lease with fence p_fence (any
-- fence when 0), serves the line, forgets the key when nothing is left in it, and reports
-- whether it ended one.
CREATE OR REPLACE FUNCTION @release(p_key bytea, p_holder bytea, p_fence bigint) RETURNS boolean
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    v_hh bytea := sha256(p_holder);
    k @keys;
    now_ bigint;
    ended boolean;
    waiting boolean;
BEGIN
    SELECT * INTO k FROM @keys WHERE kh = v_kh FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    now_ := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    -- One statement ends the lease, purges the key's expired ones, and looks at the line.
    WITH gone AS (
        DELETE FROM @leases x WHERE x.kh = v_kh
            AND (x.expires <= now_ OR (x.hh = v_hh AND (p_fence = 0 OR x.fence = p_fence)))
        RETURNING x.hh = v_hh AND x.expires > now_ AS mine)
    SELECT coalesce(bool_or(mine), false), EXISTS (SELECT 1 FROM @waiters WHERE kh = v_kh) INTO ended, waiting
    FROM gone;
    IF NOT ended THEN
        RETURN false;
    END IF;
    IF k.watched_until > now_ THEN
        PERFORM pg_notify(@@changed, md5(k.key));
    END IF;
    IF waiting THEN
        k := @serve(k, now_);
        IF k.fence < now_ AND k.watched_until <= now_ THEN -- else forget would keep the row: it granted
            PERFORM @forget(k, now_);
        END IF;
    ELSIF k.fence < now_ AND k.watched_until <= now_ THEN
        -- The uncontended path: nothing else on the key (no line, and no other lease), whose
        -- row goes (forget, in one statement).
        DELETE FROM @keys x WHERE x.kh = v_kh AND NOT EXISTS (SELECT 1 FROM @leases WHERE kh = v_kh);
    END IF;
    RETURN true;
END
$$;

-- leave takes the holder out of the key's line and gives back a lease the line granted it that
-- it has not taken, serving the next waiters. With p_try, it leaves only the place that try took,
-- and when there is none (the try has not arrived) it keeps the try out of the line for a minute.
-- It forgets the key when nothing is left in it.
CREATE OR REPLACE FUNCTION @leave(p_key bytea, p_holder bytea, p_try bigint) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    v_hh bytea := sha256(p_holder);
    k @keys;
    now_ bigint;
BEGIN
    SELECT * INTO k FROM @keys WHERE kh = v_kh FOR UPDATE;
    IF NOT FOUND THEN
        IF p_try IS NULL THEN
            RETURN;
        END IF;
        k := @lockkey(v_kh, p_key); -- to keep out a try that has not arrived
    END IF;
    now_ := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    IF p_try IS NULL THEN
        DELETE FROM @waiters WHERE kh = v_kh AND hh = v_hh;
    ELSE
        DELETE FROM @waiters WHERE kh = v_kh AND hh = v_hh AND try = p_try;
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM @leases WHERE kh = v_kh AND hh = v_hh) THEN
            DELETE FROM @left WHERE kh = v_kh AND expires <= now_;
            INSERT INTO @left (kh, hh, try, expires) VALUES (v_kh, v_hh, p_try, now_ + 60000000)
            ON CONFLICT DO NOTHING;
        END IF;
    END IF;
    DELETE FROM @leases WHERE kh = v_kh AND hh = v_hh AND untaken;
    IF FOUND THEN
        IF k.watched_until > now_ THEN
        PERFORM pg_notify(@@changed, md5(k.key));
    END IF;
    END IF;
    DELETE FROM @leases WHERE kh = v_kh AND expires <= now_;
    k := @serve(k, now_);
    PERFORM @forget(k, now_);
END
$$;

-- watch has the key's changes announced for p_for microseconds from now (at least).
CREATE OR REPLACE FUNCTION @watch(p_key bytea, p_for bigint) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    k @keys;
BEGIN
    k := @lockkey(v_kh, p_key);
    UPDATE @keys SET watched_until = greatest(watched_until, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + p_for) WHERE kh = v_kh;
END
$$;

-- inspect is core.Store.Inspect: its unexpired leases by fence (kind 0) with the key's row's
-- limit, then the places in its line whose wait has not ended, head first (kind 1), each with
-- its limit, then the row's limit (kind 2). It changes nothing.
CREATE OR REPLACE FUNCTION @inspect(p_key bytea)
RETURNS TABLE (kind integer, lim integer, holder bytea, permits integer, fence bigint,
               ttl bigint, value bytea)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    now_ bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
BEGIN
    RETURN QUERY
        SELECT 0, k.lim, l.holder, l.permits, l.fence, l.expires - now_, l.value
        FROM @keys k JOIN @leases l ON l.kh = k.kh
        WHERE k.kh = v_kh AND l.expires > now_
        UNION ALL
        SELECT 1, w.lim, w.holder, w.permits, w.seq, 0::bigint, w.value
        FROM @keys k JOIN @waiters w ON w.kh = k.kh
        WHERE k.kh = v_kh AND w.deadline > now_
        UNION ALL
        SELECT 2, k.lim, NULL::bytea, 0, 0::bigint, 0::bigint, NULL::bytea
        FROM @keys k WHERE k.kh = v_kh
        ORDER BY 1, 5;
END
$$;

-- sweep removes what its operations left behind on keys nobody uses any more, when no Store
-- swept in the last p_every microseconds: left rows past their minute, places in a line that
-- can take no grant (see live; the line is served after them), and then the rows of keys with
-- nothing left in them (forget): those whose leases expired unreleased, whose watch lapsed,
-- whose raised fence the clock has passed, or whose places were dead. Each kind is bounded by
-- p_batch rows. It reports whether it ran and how many rows of each kind it removed. A key
-- locked by an operation is skipped, for the next sweep. It runs only when the functions in
-- place are of p_version: a Store of an earlier version may have put back functions that make
-- a key's row only once, and must not see it deleted under them.
CREATE OR REPLACE FUNCTION @sweep(p_version text, p_every bigint, p_batch integer,
    OUT ran boolean, OUT keys integer, OUT places integer, OUT tries integer)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    now_ bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    c bytea;
    k @keys;
    n integer;
BEGIN
    ran := false; keys := 0; places := 0; tries := 0;
    PERFORM 1 FROM @schema s WHERE s.version = p_version AND s.swept <= now_ - p_every FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE @schema SET swept = now_;
    ran := true;
    DELETE FROM @left WHERE ctid = ANY (ARRAY(SELECT x.ctid FROM @left x WHERE x.expires <= now_ LIMIT p_batch));
    GET DIAGNOSTICS tries = ROW_COUNT;
    FOR c IN
        (SELECT DISTINCT w.kh FROM @waiters w WHERE NOT @live(w, now_) LIMIT p_batch)
        UNION
        (SELECT x.kh FROM @keys x WHERE x.fence < now_ AND x.watched_until <= now_
            AND NOT EXISTS (SELECT 1 FROM @leases l WHERE l.kh = x.kh AND l.expires > now_)
            AND NOT EXISTS (SELECT 1 FROM @waiters w WHERE w.kh = x.kh AND @live(w, now_))
         LIMIT p_batch)
    LOOP
        SELECT * INTO k FROM @keys x WHERE x.kh = c FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        now_ := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
        DELETE FROM @leases WHERE kh = c AND expires <= now_;
        DELETE FROM @waiters w WHERE w.kh = c AND NOT @live(w, now_);
        GET DIAGNOSTICS n = ROW_COUNT;
        places := places + n;
        IF n > 0 AND EXISTS (SELECT 1 FROM @waiters WHERE kh = c) THEN
            k := @serve(k, now_);
        END IF;
        IF @forget(k, now_) THEN
            keys := keys + 1;
        END IF;
    END LOOP;
END
$$;

-- accept_fence records p_fence for the resource unless a higher one was accepted; it returns
-- the highest fence accepted before (0 for none). The row stays locked until the caller's
-- transaction ends.
CREATE OR REPLACE FUNCTION @accept_fence(p_resource bytea, p_fence bigint, OUT accepted boolean,
    OUT highest bigint)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_rh bytea := sha256(p_resource);
BEGIN
    INSERT INTO @fences (rh, resource, fence) VALUES (v_rh, p_resource, p_fence)
    ON CONFLICT (rh) DO NOTHING;
    IF FOUND THEN
        accepted := true; highest := 0;
        RETURN;
    END IF;
    SELECT f.fence INTO highest FROM @fences f WHERE f.rh = v_rh FOR UPDATE;
    accepted := p_fence >= highest;
    IF accepted AND p_fence > highest THEN
        UPDATE @fences SET fence = p_fence WHERE rh = v_rh;
    END IF;
END
$$;
