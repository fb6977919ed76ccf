-- acquire is core.Store.Acquire, and core.FenceRaiser's methods: a new grant's fence is at least
-- p_floor, and a lease the holder holds is raised to p_raise. When p_lim is not the key's limit
-- (held) it sets err to 'limit ' and the key's limit, and changes nothing. When the holder holds
-- another number of permits it sets err and changes nothing but what serving the line would have.
-- A refusal reports in fence the key's last fence (later grants are above it). p_try names a
-- try its caller may give up on in flight (one that will wait, or one of a holder id drawn for
-- the call): one its caller gave up on (see leave) is refused and takes no place and no lease.
-- p_delay is the lease's lock delay (see tables.sql), set by every grant, renewed or new; a
-- holder whose expired lease is in its delay is refused (or waits in line) until it ends.
CREATE FUNCTION @acquire(
    p_key bytea, p_holder bytea, p_permits integer, p_lim integer, p_ttl bigint, p_wait bigint,
    p_value bytea, p_floor bigint, p_raise bigint, p_try bigint, p_channel text, p_pid integer,
    p_started timestamptz, p_delay bigint,
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
    closed bigint;  -- when the lock delay of the holder's expired lease ends; NULL: none
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
        INSERT INTO @leases (kh, hh, holder, permits, fence, expires, untaken, value, delay)
        SELECT v_kh, v_hh, p_holder, p_permits, f, now_ + p_ttl, false, p_value, p_delay
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
    -- One read of the key's leases: the permits the unexpired ones hold or a lock delay keeps
    -- closed, whether the holder holds one, when the delay of its expired one ends, and whether
    -- any expired past its delay (to be purged, which is rare).
    SELECT coalesce(sum(x.permits) FILTER (WHERE x.expires + x.delay > now_), 0),
           count(*) FILTER (WHERE x.expires + x.delay <= now_),
           bool_or(x.hh = v_hh AND x.expires > now_),
           min(x.expires + x.delay) FILTER (WHERE x.hh = v_hh AND x.expires <= now_ AND x.expires + x.delay > now_)
    INTO used, expired, holds, closed FROM @leases x WHERE x.kh = v_kh;
    IF expired > 0 THEN
        DELETE FROM @leases WHERE kh = v_kh AND expires + delay <= now_;
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
                pid = p_pid, started = p_started, tried = now_, delay = p_delay
            WHERE kh = v_kh AND hh = v_hh;
            placed := FOUND;
        END IF;
        -- Serving grants only free permits: with every permit held by unexpired leases (or
        -- closed by a delay), whose limit every live place has (a busy Mutex, whose waiter joins
        -- the line), there is nothing to serve, and the release that frees one serves the line.
        IF used = 0 OR used < k.lim THEN
            placed := NULL; -- serving may have passed it over
            k := @serve(k, now_);
            waiting := EXISTS (SELECT 1 FROM @waiters WHERE kh = v_kh);
            SELECT coalesce(sum(x.permits), 0), bool_or(x.hh = v_hh AND x.expires > now_) INTO used, holds
            FROM @leases x WHERE x.kh = v_kh;
        END IF;
    END IF;
    IF holds THEN
        SELECT * INTO l FROM @leases WHERE kh = v_kh AND hh = v_hh;
        IF l.permits <> p_permits THEN
            err := format('holder already holds %s permits, asked for %s', l.permits, p_permits);
            RETURN;
        END IF;
        l.fence := greatest(l.fence, p_raise);
        UPDATE @leases SET expires = now_ + p_ttl, untaken = false, value = p_value, fence = l.fence, delay = p_delay
        WHERE kh = v_kh AND hh = v_hh;
        IF l.fence > k.fence THEN
            UPDATE @keys SET fence = l.fence WHERE kh = v_kh;
        END IF;
        granted := true; fence := l.fence;
        RETURN;
    END IF;
    IF used + p_permits > p_lim OR waiting OR closed IS NOT NULL THEN
        -- Its place, kept above, unless it had none or serving passed it over.
        IF p_wait > 0 AND placed IS NULL THEN
            placed := EXISTS (SELECT 1 FROM @waiters WHERE kh = v_kh AND hh = v_hh);
        END IF;
        IF p_wait > 0 AND NOT placed THEN
            WITH s AS (UPDATE @keys SET seq = seq + 1 WHERE kh = v_kh RETURNING seq)
            INSERT INTO @waiters (kh, seq, hh, holder, permits, lim, ttl, floor, deadline, value,
                                  try, channel, pid, started, tried, delay)
            SELECT v_kh, s.seq, v_hh, p_holder, p_permits, p_lim, p_ttl, p_floor,
                   now_ + p_wait, p_value, p_try, p_channel, p_pid, p_started, now_, p_delay
            FROM s;
        END IF;
        IF closed IS NOT NULL THEN
            -- The holder's own expired lease keeps its permits closed: it waits the delay out.
            retry := closed - now_;
        ELSE
            -- When leases holding enough permits have expired and their delays ended; with room
            -- but others ahead, the first such end is the next change expiry alone brings.
            need := greatest(used + p_permits - p_lim, 1);
            SELECT coalesce(min(e.ends) - now_, 0) INTO retry FROM (
                SELECT expires + delay AS ends, sum(permits) OVER (ORDER BY expires + delay, hh) AS freed
                FROM @leases WHERE kh = v_kh) e
            WHERE e.freed >= need;
        END IF;
        fence := k.fence;
        RETURN;
    END IF;
    k.fence := greatest(k.fence + 1, now_, p_floor);
    INSERT INTO @leases (kh, hh, holder, permits, fence, expires, untaken, value, delay)
    VALUES (v_kh, v_hh, p_holder, p_permits, k.fence, now_ + p_ttl, false, p_value, p_delay);
    UPDATE @keys SET fence = k.fence, lim = p_lim WHERE kh = v_kh;
    IF k.watched_until > now_ THEN
        PERFORM pg_notify(@@changed, md5(k.key));
    END IF;
    granted := true; fence := k.fence;
END
$$;
