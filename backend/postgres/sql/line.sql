-- lockkey locks key's row, creating it if need be, and returns it. A row another transaction
-- deletes while this one waits for its lock is made again.
CREATE FUNCTION @lockkey(p_kh bytea, p_key bytea) RETURNS @keys LANGUAGE plpgsql AS $$
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
-- listener's ("leasehold listener " and the channel's last 16 characters, the Store's id), maybe
-- with more after it (PgBouncer's application_name_add_host appends " - host:port"). A pooler in
-- session mode keeps a server session after its client's connection closed, and gives it to its
-- next client: the session reset (DISCARD ALL), or the next client, renames it. A start or name the caller may not see
-- (another role's backend) counts as alive.
--
-- It and live are PL/pgSQL, whose plans a session keeps: a function in SQL is parsed and planned
-- again at each transaction that calls it, which cost a grant more than the rest of its work.
CREATE FUNCTION @alive(p_pid integer, p_started timestamptz, p_channel text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pg_stat_get_activity(p_pid) a
                   WHERE a.pid = p_pid AND (a.backend_start IS NULL OR a.backend_start = p_started)
                     AND coalesce(left(a.application_name, 35) = 'leasehold listener ' || right(p_channel, 16), true));
END
$$;

-- live reports whether place w may still take a grant at p_now: its wait has not ended, and its
-- Store's listening backend still runs or, for a place taken while that Store could not listen
-- (its waiter polls), its holder asked within the last ten minutes.
CREATE FUNCTION @live(w @waiters, p_now bigint) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF w.deadline <= p_now THEN
        RETURN false;
    ELSIF w.pid IS NULL THEN
        RETURN w.tried > p_now - 600000000;
    END IF;
    RETURN @alive(w.pid, w.started, w.channel);
END
$$;

-- held returns the key's limit: its row's while it has an unexpired lease (or one a lock delay
-- keeps), else that of the first live place in its line, else NULL (nothing holds the key: any
-- limit may have it).
CREATE FUNCTION @held(k @keys, p_now bigint) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v integer;
BEGIN
    IF EXISTS (SELECT 1 FROM @leases WHERE kh = k.kh AND expires + delay > p_now) THEN
        RETURN k.lim;
    END IF;
    SELECT w.lim INTO v FROM @waiters w WHERE w.kh = k.kh AND @live(w, p_now) ORDER BY w.seq LIMIT 1;
    RETURN v;
END
$$;

-- forget deletes the key's row when nothing is left in it — no lease (the caller purged the
-- expired ones whose delay ended), no place in its line, no watch — and its last fence is below p_now, and
-- reports whether it did. The caller holds the row's lock.
CREATE FUNCTION @forget(k @keys, p_now bigint) RETURNS boolean LANGUAGE plpgsql AS $$
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
-- whose permits are not free, or whose holder's expired lease is in its lock delay (the delay's
-- end frees it). Places whose wait ended, whose holder holds a lease already, or that can take
-- no grant (see live) are dropped on the way. Each grant, with its place's lock delay, is
-- announced on its waiter's channel (with its fence), and to watchers. It returns k as it left
-- it, written back when it granted anything. The caller purged the key's leases expired past
-- their delay: every lease left holds its permits, or keeps them closed.
CREATE FUNCTION @serve(k @keys, p_now bigint) RETURNS @keys LANGUAGE plpgsql AS $$
DECLARE
    p @waiters;
    used bigint;
    holds boolean;
    closed boolean;
    alive boolean;
    granted boolean := false;
BEGIN
    LOOP
        SELECT * INTO p FROM @waiters WHERE kh = k.kh ORDER BY seq LIMIT 1;
        EXIT WHEN NOT FOUND;
        holds := false; closed := false;
        IF p.deadline > p_now THEN
            -- One read of the key's leases: the permits they hold or keep closed (the grants of
            -- this loop included), and whether the place's holder holds one, or has one in its
            -- lock delay.
            SELECT coalesce(sum(x.permits), 0), coalesce(bool_or(x.hh = p.hh AND x.expires > p_now), false),
                   coalesce(bool_or(x.hh = p.hh AND x.expires <= p_now AND x.expires + x.delay > p_now), false)
            INTO used, holds, closed
            FROM @leases x WHERE x.kh = k.kh;
        END IF;
        IF p.deadline <= p_now OR holds THEN
            DELETE FROM @waiters WHERE kh = k.kh AND seq = p.seq;
            CONTINUE;
        END IF;
        EXIT WHEN closed OR used + p.permits > p.lim;
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
        INSERT INTO @leases (kh, hh, holder, permits, fence, expires, untaken, value, delay)
        VALUES (k.kh, p.hh, p.holder, p.permits, k.fence, p_now + p.ttl, true, p.value, p.delay);
        used := used + p.permits;
        granted := true;
        IF p.channel IS NOT NULL THEN
            -- The notice and the grant's fence, which its waiter takes without asking again.
            PERFORM pg_notify(p.channel, md5(int4send(length(k.key)) || k.key || p.holder) || ' ' || k.fence);
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
