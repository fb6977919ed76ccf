-- release is core.Store.Release: it ends the holder's unexpired lease with fence p_fence (any
-- fence when 0), serves the line, forgets the key when nothing is left in it, and reports
-- whether it ended one. An expired lease is not ended: one in its lock delay keeps it.
CREATE FUNCTION @release(p_key bytea, p_holder bytea, p_fence bigint) RETURNS boolean
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
    -- One statement ends the lease, purges the key's leases expired past their delay, and looks
    -- at the line.
    WITH gone AS (
        DELETE FROM @leases x WHERE x.kh = v_kh
            AND (x.expires + x.delay <= now_ OR (x.hh = v_hh AND (p_fence = 0 OR x.fence = p_fence) AND x.expires > now_))
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
