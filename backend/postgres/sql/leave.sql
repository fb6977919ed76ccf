-- leave takes the holder out of the key's line and gives back a lease the line granted it that
-- it has not taken (unexpired: an expired one keeps its lock delay), serving the next waiters. With p_try, it leaves only the place that try took,
-- and when there is none (the try has not arrived) it keeps the try out of the line for a minute.
-- It forgets the key when nothing is left in it.
CREATE FUNCTION @leave(p_key bytea, p_holder bytea, p_try bigint) RETURNS void
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
    DELETE FROM @leases WHERE kh = v_kh AND hh = v_hh AND untaken AND expires > now_;
    IF FOUND THEN
        IF k.watched_until > now_ THEN
        PERFORM pg_notify(@@changed, md5(k.key));
    END IF;
    END IF;
    DELETE FROM @leases WHERE kh = v_kh AND expires + delay <= now_;
    k := @serve(k, now_);
    PERFORM @forget(k, now_);
END
$$;
