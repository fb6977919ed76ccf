-- extend is core.Store.Extend: ok is false when the holder holds no unexpired lease.
CREATE FUNCTION @extend(p_key bytea, p_holder bytea, p_ttl bigint,
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
